"""Per-rank tables that stay readable at any rank count: past MAX_RANK_ROWS ranks, the distribution
across ranks (min, p10, median, p90, max of each column) and the TOP_RANKS ranks that matter most,
instead of one row per rank; and the straggler section (analyzers.crossrank.stragglers).

The JSON document and `analyze --tables` keep every rank; these are the tables people read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .crossrank_tables import Section
from .formats import UNDEFINED, dur, pct

MAX_RANK_ROWS = 16  # up to this many ranks, one row each
TOP_RANKS = 5  # past it: this many ranks of interest after the distribution rows
QUANTILES = (("min", 0.0), ("p10", 0.1), ("median", 0.5), ("p90", 0.9), ("max", 1.0))


def many(n_ranks: int) -> bool:
    return n_ranks > MAX_RANK_ROWS


def distribution_rows(values: Sequence[Sequence[float | None]], formats: Sequence[Callable[[Any], str]]
                      ) -> list[list[str]]:
    """Rows 'min', 'p10', 'median', 'p90', 'max' of each column (values: per column, one per rank;
    None where undefined, left out of that column's quantiles)."""
    rows = []
    for label, q in QUANTILES:
        row = [f"{label} of {len(values[0]) if values else 0} ranks"]
        for col, fmt in zip(values, formats, strict=True):
            x = sorted(float(v) for v in col if v is not None)
            row.append(fmt(quantile(x, q)) if x else UNDEFINED)
        rows.append(row)
    return rows


def quantile(x: Sequence[float], q: float) -> float:
    """The q-quantile of sorted x, interpolated linearly (numpy's default), in plain Python: the CLI draws
    a cached document without loading numpy."""
    pos = q * (len(x) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(x) - 1)
    return x[lo] + (x[hi] - x[lo]) * (pos - lo)


def straggler_section(view: dict[str, Any] | None, top: int = 10) -> Section | None:
    """The straggler view: outliers first, then the ranks most often last, with what came before."""
    if not view or not view.get("ranks"):
        return None
    ranks = view["ranks"]
    order = sorted(ranks, key=lambda r: (not r["outlier"], -r["n_last"], -r["median_lateness_ns"]))[:top]
    rows = []
    for r in order:
        before = (f"{r['before_mostly']} ({pct(_share(r, r['before_mostly']))} of "
                  f"{dur(r['before_window_ns'])})" if r["before_mostly"] else "-")
        rows.append([f"rank {r['rank']}" + (" (outlier)" if r["outlier"] else ""), r["host"] or "-",
                     f"{r['n_last']} / {r['n_collectives']}", dur(r["median_lateness_ns"]),
                     dur(r["worst_lateness_ns"]), f"{r['z']:.1f}", before])
    d = view["distribution"].get("median_lateness_ns", {})
    cap = (f"{view['n_collectives']} collectives; median lateness across {len(ranks)} ranks: p50 {dur(d.get('p50'))}, "
           f"p90 {dur(d.get('p90'))}, max {dur(d.get('max'))}. Outliers (robust z >= "
           f"{view['params']['min_z']}): {', '.join(map(str, view['outliers'])) or 'none'}. "
           f"Before: what the rank's {view['before_source']} held, over the collectives it was last to")
    hosts = view.get("hosts") or []
    if hosts:
        worst = sorted(hosts, key=lambda h: -h["median_lateness_ns"])[:top]
        cap += " Hosts by median lateness: " + ", ".join(
            f"{h['host']} {dur(h['median_lateness_ns'])} ({len(h['ranks'])} ranks, {h['n_last']} last)" for h in worst)
    return Section(f"Stragglers (top {min(top, len(ranks))} of {len(ranks)} ranks)",
                   ["rank", "host", "last / collectives", "median lateness", "worst lateness", "z",
                    "before its late arrivals"], rows, cap + ".")


def _share(r: dict[str, Any], what: str) -> float | None:
    key = {"compute": "before_compute_ns", "other GPU work": "before_other_gpu_ns", "idle GPU": "before_idle_ns"}
    return r[key[what]] / r["before_window_ns"] if r["before_window_ns"] else None
