"""Rows of a TraceDiff's tables as text: how the numbers read, built once for every front end.

Ratios in percent with deltas in points, times in ms, changes coloured (rich markup, when asked)
by whether they help overlap. The CLI draws these rows as rich tables and Markdown
(overlapscope/render_diff.py), the diff report as HTML (viz/export_html.py).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from analyzers.diff import TraceDiff

UNDEFINED = "n/a"

# metric -> (label, kind, better): kind "ratio" | "time" | "count"; better +1 higher is better,
# -1 lower is better, 0 neither (colour only says which way helps overlap or speed).
METRICS: dict[str, tuple[str, str, int]] = {
    "overlap_ratio": ("overlap ratio (overlap/comm)", "ratio", +1),
    "overlap_ratio_rank_mean": ("overlap ratio, mean of ranks", "ratio", +1),
    "overlap_ratio_rank_median": ("overlap ratio, median rank", "ratio", +1),
    "hidden_fraction_of_min": ("hidden / min(comm, compute)", "ratio", +1),
    "iteration_ns_median": ("iteration time, median", "time", -1),
    "iteration_ns_worst": ("iteration time, worst", "time", -1),
    "spread_ns": ("iteration spread (± half IQR)", "time", -1),
    "exposed_comm_ns_per_step_median": ("exposed comm per iteration, median", "time", -1),
    "exposed_comm_ns_median": ("exposed comm per iteration, median", "time", -1),
    "exposed_comm_ns": ("exposed communication", "time", -1),
    "comm_ns": ("communication", "time", 0),
    "compute_ns": ("compute", "time", 0),
    "overlap_ns": ("overlap", "time", +1),
    "compute_compute_overlap_ns": ("compute/compute overlap", "time", 0),
    "busy_ns": ("GPU busy", "time", 0),
    "span_ns": ("GPU span", "time", -1),
    "idle_ns": ("GPU idle", "time", -1),
    "peer_wait_ns": ("peer wait", "time", -1),
    "blocking_sync_ns": ("blocking-sync time", "time", -1),
    "n_comm": ("comm activities", "count", 0),
    "n_compute": ("compute activities", "count", 0),
    "n_gpu": ("GPU activities", "count", 0),
}
# per-rank table: metric -> short column label
RANK_TABLE_METRICS = {"overlap_ratio": "overlap", "exposed_comm_ns": "exposed comm",
                      "iteration_ns_median": "iteration median", "span_ns": "GPU span"}
KERNEL_NAME_WIDTH = 72


def missing(v: Any) -> bool:
    """None or NaN: a value the diff could not measure (shown as n/a)."""
    return v is None or (isinstance(v, float) and math.isnan(v))


def value(v: Any, kind: str) -> str:
    if missing(v):
        return UNDEFINED
    if kind == "ratio":
        return f"{100 * v:.1f}%"
    if kind == "time":
        return f"{v / 1e6:.3f} ms"
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.1f}"


def delta(v: Any, kind: str) -> str:
    if missing(v):
        return UNDEFINED
    if v == 0:
        return "0"
    if kind == "ratio":
        return f"{100 * v:+.1f} pt"
    if kind == "time":
        return f"{v / 1e6:+.3f} ms"
    return f"{v:+,.0f}" if float(v).is_integer() else f"{v:+,.1f}"


def rel(v: Any) -> str:
    if missing(v):
        return UNDEFINED
    return "0" if v == 0 else f"{100 * v:+.1f}%"


def _style(d: Any, better: int) -> str | None:
    if missing(d) or d == 0 or better == 0:
        return None
    return "green" if (d > 0) == (better > 0) else "red"


def _styled(text: str, style: str | None, markup: bool) -> str:
    return f"[{style}]{text}[/{style}]" if style and markup else text


def metric_rows(frame: pd.DataFrame, markup: bool = True) -> list[list[str]]:
    """(metric, a, b, delta, rel) rows in the METRICS order, formatted."""
    known = frame[frame["metric"].isin(list(METRICS))].copy()
    known["_order"] = known["metric"].map({m: i for i, m in enumerate(METRICS)})
    rows = []
    for r in known.sort_values("_order").itertuples(index=False):
        label, kind, better = METRICS[r.metric]
        style = _style(r.delta, better)
        rows.append([label, value(r.a, kind), value(r.b, kind), _styled(delta(r.delta, kind), style, markup),
                     _styled(rel(r.rel), style, markup)])
    return rows


def rank_rows(d: TraceDiff, markup: bool = True) -> tuple[list[str], list[list[str]]]:
    """Compact per-rank comparison: the metrics people look at first, A -> B with delta."""
    header = ["rank"]
    for short in RANK_TABLE_METRICS.values():
        header += [f"{short} A", "B", "Δ"]
    rows = []
    for (ra, rb), g in d.ranks.groupby(["rank_a", "rank_b"], sort=True):
        by = g.set_index("metric")
        row = [str(ra) if ra == rb else f"{ra}↔{rb}"]
        for m in RANK_TABLE_METRICS:
            _, kind, better = METRICS[m]
            x = by.loc[m]
            row += [value(x["a"], kind), value(x["b"], kind), _styled(delta(x["delta"], kind),
                                                                      _style(x["delta"], better), markup)]
        rows.append(row)
    return header, rows


def changed_kernels(d: TraceDiff) -> pd.DataFrame:
    k = d.kernels
    return k[(k["count_delta"] != 0) | (k["total_ns_delta"] != 0)]


def kernel_rows(d: TraceDiff, top: int, width: int = KERNEL_NAME_WIDTH) -> tuple[list[str], list[list[str]]]:
    header = ["kernel", "cat", "count A", "B", "Δ", "total A", "B", "Δ", "Δ%", "mean A", "B"]
    rows = []
    for r in changed_kernels(d).head(top).itertuples(index=False):
        name = r.name if len(r.name) <= width else r.name[: width - 1] + "…"
        if r.presence != "both":
            name += f"  ({r.presence})"
        rows.append([name, r.category, value(r.count_a, "count"), value(r.count_b, "count"),
                     delta(r.count_delta, "count"), value(r.total_ns_a, "time"), value(r.total_ns_b, "time"),
                     delta(r.total_ns_delta, "time"), rel(r.total_rel), _us(r.mean_ns_a), _us(r.mean_ns_b)])
    return header, rows


def _us(ns: Any) -> str:
    return UNDEFINED if missing(ns) else f"{ns / 1e3:,.1f} µs"
