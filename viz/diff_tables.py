"""Rows of a TraceDiff's tables as text: how the numbers read, built once for every front end.

Ratios in percent with deltas in points, times in ms, changes coloured (rich markup, when asked)
by whether they help overlap. The CLI draws these rows as rich tables and Markdown
(overlapscope/render_diff.py), the diff report as HTML (viz/export_html.py).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analyzers.diff import TraceDiff

from . import labels
from .labels import UNDEFINED

# The metrics a diff shows, in display order; label, kind and which way is better come from the
# metric registry (viz/labels.py), as in every other table.
DIFF_METRICS = (
    "overlap_ratio", "overlap_ratio_rank_mean", "overlap_ratio_rank_median", "hidden_fraction_of_min",
    "iteration_ns_median", "iteration_ns_worst", "spread_ns", "exposed_comm_ns_per_step_median",
    "exposed_comm_ns_median", "exposed_comm_ns", "comm_ns", "compute_ns", "overlap_ns", "compute_compute_overlap_ns",
    "busy_ns", "span_ns", "idle_ns", "peer_wait_ns", "blocking_sync_ns", "sync_gpu_idle_ns", "n_comm", "n_compute",
    "n_gpu",
)
# metric -> (label, kind, better)
METRICS: dict[str, tuple[str, str, int]] = {
    k: (labels.metric(k).label, labels.metric(k).kind, labels.metric(k).better) for k in DIFF_METRICS}
# per-rank table (A, B and Δ of each in narrow columns): metric -> its short label
RANK_TABLE_METRICS = {k: labels.metric(k).short_label for k in
                      ("overlap_ratio", "exposed_comm_ns", "iteration_ns_median", "span_ns")}
KERNEL_NAME_WIDTH = 72
missing = labels.missing


def value(v: Any, kind: str) -> str:
    return labels.value(kind, v)


def delta(v: Any, kind: str) -> str:
    return labels.delta(kind, v)


def rel(v: Any) -> str:
    return labels.relative(v)


def _style(d: Any, better: int) -> str | None:
    if missing(d) or d == 0 or better == 0:
        return None
    return "green" if (d > 0) == (better > 0) else "red"


def _styled(text: str, style: str | None, markup: bool) -> str:
    return f"[{style}]{text}[/{style}]" if style and markup else text


def metric_rows(frame: pd.DataFrame, markup: bool = True, every: bool = False) -> list[list[str]]:
    """(metric, a, b, delta, rel) rows in the METRICS order, formatted; with every, the frame's other
    metrics follow in its order (labelled and formatted by the registry), so none is left out."""
    order = list(METRICS) + ([m for m in dict.fromkeys(frame["metric"]) if m not in METRICS] if every else [])
    known = frame[frame["metric"].isin(order)].copy()
    known["_order"] = known["metric"].map({m: i for i, m in enumerate(order)})
    rows = []
    for r in known.sort_values("_order", kind="stable").itertuples(index=False):
        m = labels.metric(r.metric)
        style = _style(r.delta, m.better)
        rows.append([m.label, value(r.a, m.kind), value(r.b, m.kind), _styled(delta(r.delta, m.kind), style, markup),
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


def collective_rows(d: TraceDiff) -> tuple[list[str], list[list[str]]]:
    """Bus bandwidth per (operation, size bucket), A vs B (no rows when neither side has communication)."""
    header = ["operation", "size", "n A", "n B", "busbw A GB/s", "busbw B GB/s", "Δ GB/s", "Δ%", "of link A",
              "of link B"]
    rows = []
    for r in d.collectives.itertuples(index=False):
        rows.append([str(r.op), str(r.size_bucket), str(r.n_a), str(r.n_b), _gbps(r.busbw_median_gbps_a),
                     _gbps(r.busbw_median_gbps_b), _gbps(r.busbw_delta_gbps, signed=True), rel(r.busbw_rel),
                     value(r.link_fraction_a, "ratio"), value(r.link_fraction_b, "ratio")])
    return header, rows


def _gbps(v: Any, signed: bool = False) -> str:
    return UNDEFINED if missing(v) else (f"{float(v):+,.1f}" if signed else f"{float(v):,.1f}")
