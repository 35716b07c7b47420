"""The straggler view: which ranks arrive late to collectives, by how much, and what they did before.

Per matched collective whose peers are known, a rank's lateness is its aligned start minus the
earliest rank's start (0 for the first to arrive); the last to arrive is the collective's late rank
(peer_wait: none when the spread is below min_skew_ns). Per rank: how often it was last, its median
and worst lateness, and, over the collectives it was last to, what its own GPU did in the window
before (from the end of its previous communication kernel to the collective's start): compute,
other GPU work, or nothing (idle GPU: the delay came from the host side). The view reads the rank's
own timeline, not a critical path across ranks.

Outliers: robust z-score of each rank's median lateness, 0.6745 (x - median) / MAD (Iglewicz and
Hoaglin), with the mean absolute deviation standing in when the MAD is 0; ranks at or above
StragglerParams.min_z and late by at least min_lateness_ns are flagged. Ranks that are all late by
the same jitter, or take turns, flag nothing (the look-alike tests pin that).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analyzers.timeline import intervals as iv
from analyzers.timeline.model import RankTrace

BEFORE_SOURCE = "own GPU timeline since the rank's previous communication kernel"


@dataclass(frozen=True)
class StragglerParams:
    """Thresholds of the straggler view; each default says why."""

    # Iglewicz and Hoaglin's cut for the modified z-score: beyond it a value is an outlier.
    min_z: float = 3.5
    # A rank is flagged only when its median lateness is at least this: below, it is launch jitter
    # (the same 2 µs as CrossRankParams.min_skew_ns).
    min_lateness_ns: int = 2_000
    # Rows in the lists meant for people (top ranks in tables).
    top_k: int = 10


def before_windows(trace: RankTrace, rows: np.ndarray) -> dict[str, np.ndarray]:
    """For the given comm rows of the rank's gpu table: the window from the end of the rank's previous
    communication kernel to the row's start, and how its GPU spent it (compute, other GPU work, idle)."""
    g = trace.gpu
    start = g["start_ns"].to_numpy(dtype=np.int64)
    end = g["end_ns"].to_numpy(dtype=np.int64)
    cat = g["category"].to_numpy()
    comm = cat == "comm"
    cs, ce = start[comm], end[comm]
    order = np.argsort(cs, kind="stable")
    cs, run_end = cs[order], np.maximum.accumulate(ce[order]) if len(ce) else ce
    rs = start[rows]
    k = np.searchsorted(cs, rs, side="left") - 1  # comm kernels that started before this row
    lo = np.where(k >= 0, run_end[np.maximum(k, 0)] if len(run_end) else 0, rs)
    lo = np.minimum(lo, rs)
    compute = _covered_in(iv.union(start[cat == "compute"], end[cat == "compute"]), lo, rs)
    busy = _covered_in(iv.union(start, end), lo, rs)
    window = rs - lo
    return {"window_ns": window, "compute_ns": compute, "other_gpu_ns": busy - compute,
            "idle_ns": window - busy}


def _covered_in(u: iv.Intervals, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Time of the merged set u inside each [lo, hi) (two searchsorted over running totals)."""
    s, e = u
    if not len(s):
        return np.zeros(len(lo), dtype=np.int64)
    before = np.r_[0, np.cumsum(e - s)].astype(np.int64)

    def upto(t: np.ndarray) -> np.ndarray:
        j = np.searchsorted(s, t, side="right") - 1
        jc = np.maximum(j, 0)
        return np.where(j >= 0, before[jc] + np.clip(t - s[jc], 0, e[jc] - s[jc]), 0)

    return upto(hi) - upto(lo)


def lateness(colls: pd.DataFrame, members: pd.DataFrame) -> pd.DataFrame:
    """One row per (collective with known peers, rank): coll_id, rank, row, lateness_ns, last."""
    if members.empty or colls.empty:
        return pd.DataFrame({"coll_id": [], "rank": [], "row": [], "lateness_ns": [], "last": []})
    cid = colls["coll_id"].to_numpy(dtype=np.int64)
    pos = np.searchsorted(cid, members["coll_id"].to_numpy(dtype=np.int64))
    known = colls["peers_known"].to_numpy(dtype=bool)[pos] & (colls["n_ranks"].to_numpy()[pos] > 1)
    first = colls["first_start_ns"].to_numpy(dtype=np.int64)[pos]
    late = colls["late_rank"].to_numpy(dtype=np.int64)[pos]
    rank = members["rank"].to_numpy(dtype=np.int64)
    out = pd.DataFrame({"coll_id": members["coll_id"].to_numpy(dtype=np.int64), "rank": rank,
                        "row": members["row"].to_numpy(dtype=np.int64),
                        "lateness_ns": members["start_ns"].to_numpy(dtype=np.int64) - first,
                        "last": late == rank}, copy=False)
    return out if known.all() else out[known].reset_index(drop=True)


def robust_z(x: np.ndarray) -> np.ndarray:
    """Modified z-score 0.6745 (x - median) / MAD; MAD 0: (x - median) / (1.2533 mean |x - median|)."""
    if not len(x):
        return np.zeros(0)
    med = float(np.median(x))
    dev = np.abs(x - med)
    mad = float(np.median(dev))
    if mad > 0:
        return 0.6745 * (x - med) / mad
    mean_ad = float(dev.mean())
    return (x - med) / (1.2533 * mean_ad) if mean_ad > 0 else np.zeros(len(x))


def straggler_view(traces: dict[int, RankTrace], colls: pd.DataFrame, members: pd.DataFrame,
                   params: StragglerParams | None = None) -> dict[str, Any]:
    """The straggler section: per rank lateness, outliers, hosts, and the distribution across ranks."""
    params = params or StragglerParams()
    lat = lateness(colls, members)
    ranks = sorted(traces)
    out: dict[str, Any] = {"n_collectives": int(lat["coll_id"].nunique()) if len(lat) else 0,
                           "before_source": BEFORE_SOURCE, "params": params.__dict__.copy(), "ranks": [],
                           "outliers": [], "hosts": [], "distribution": {}}
    if lat.empty:
        return out
    o = np.argsort(lat["rank"].to_numpy(), kind="stable")  # by rank: the columns it reads, one at a time
    rank_arr = lat["rank"].to_numpy()[o]
    ln = lat["lateness_ns"].to_numpy(dtype=np.int64)[o]
    last = lat["last"].to_numpy(dtype=bool)[o]
    coll_ids, coll_rows = lat["coll_id"].to_numpy()[o], lat["row"].to_numpy()[o]
    del lat, o
    heads = np.flatnonzero(np.r_[True, rank_arr[1:] != rank_arr[:-1]])
    bounds = dict(zip(rank_arr[heads].tolist(), zip(heads, np.r_[heads[1:], len(rank_arr)], strict=True),
                      strict=True))
    rows = []
    for r in ranks:
        if r not in bounds:
            continue
        a, b = bounds[r]
        x, lst = ln[a:b], last[a:b]
        worst = a + int(np.argmax(x))
        row: dict[str, Any] = {
            "rank": r, "host": traces[r].hostname or None, "n_collectives": b - a, "n_last": int(lst.sum()),
            "last_share": float(lst.mean()), "median_lateness_ns": int(np.median(x)),
            "worst_lateness_ns": int(x.max()), "worst_coll_id": int(coll_ids[worst]),
        }
        row.update(_before(traces[r], coll_rows[a:b][lst]))
        rows.append(row)
    med = np.array([r["median_lateness_ns"] for r in rows], dtype=np.float64)
    z = robust_z(med)
    for row, zi in zip(rows, z, strict=True):
        row["z"] = float(zi)
        row["outlier"] = bool(zi >= params.min_z and row["median_lateness_ns"] >= params.min_lateness_ns)
    out["ranks"] = rows
    out["outliers"] = [r["rank"] for r in sorted(rows, key=lambda d: -d["z"]) if r["outlier"]]
    out["distribution"] = {k: _quantiles(np.array([r[k] for r in rows], dtype=np.float64))
                           for k in ("median_lateness_ns", "worst_lateness_ns", "last_share")}
    out["hosts"] = _hosts(rows)
    return out


def _before(trace: RankTrace, rows: np.ndarray) -> dict[str, Any]:
    """Sums over the collectives the rank was last to of what its GPU did in the window before."""
    if not len(rows):
        return {"before_window_ns": 0, "before_compute_ns": 0, "before_other_gpu_ns": 0, "before_idle_ns": 0,
                "before_mostly": None}
    w = before_windows(trace, rows)
    sums = {k: int(w[k].sum()) for k in ("window_ns", "compute_ns", "other_gpu_ns", "idle_ns")}
    parts = {"compute": sums["compute_ns"], "other GPU work": sums["other_gpu_ns"], "idle GPU": sums["idle_ns"]}
    top = max(parts, key=lambda k: parts[k])
    return {"before_window_ns": sums["window_ns"], "before_compute_ns": sums["compute_ns"],
            "before_other_gpu_ns": sums["other_gpu_ns"], "before_idle_ns": sums["idle_ns"],
            "before_mostly": top if parts[top] > 0 else None}


def _quantiles(x: np.ndarray) -> dict[str, float | None]:
    if not len(x):
        return {"min": None, "p50": None, "p90": None, "p99": None, "max": None}
    q = np.quantile(x, [0, 0.5, 0.9, 0.99, 1.0])
    return dict(zip(("min", "p50", "p90", "p99", "max"), (float(v) for v in q), strict=True))


def _hosts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ranks grouped by the host their trace names (empty when no trace names one)."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["host"]:
            by.setdefault(r["host"], []).append(r)
    return [{"host": h, "ranks": [r["rank"] for r in rs], "n_last": sum(r["n_last"] for r in rs),
             "median_lateness_ns": int(np.median([r["median_lateness_ns"] for r in rs])),
             "worst_lateness_ns": max(r["worst_lateness_ns"] for r in rs),
             "outliers": [r["rank"] for r in rs if r["outlier"]]}
            for h, rs in sorted(by.items())]


def lateness_matrix(colls: pd.DataFrame, members: pd.DataFrame, ranks: list[int],
                    max_columns: int = 400) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Rank x collective lateness (ns) for a heatmap: collectives in id order, binned into at most
    max_columns columns (each the worst lateness of its bin), NaN where a rank is not in any of them.
    Returns (matrix ranks x columns, first coll_id of each column, ranks)."""
    lat = lateness(colls, members)
    ids = np.unique(lat["coll_id"].to_numpy(dtype=np.int64)) if len(lat) else np.zeros(0, dtype=np.int64)
    n_cols = min(max_columns, len(ids))
    mat = np.full((len(ranks), n_cols), np.nan)
    if not n_cols:
        return mat, ids, ranks
    col_of_id = (np.arange(len(ids)) * n_cols) // len(ids)
    col = col_of_id[np.searchsorted(ids, lat["coll_id"].to_numpy(dtype=np.int64))]
    row_of = {r: i for i, r in enumerate(ranks)}
    ri = np.array([row_of.get(int(r), -1) for r in lat["rank"].to_numpy()], dtype=np.int64)
    keep = ri >= 0
    flat = np.full(len(ranks) * n_cols, -np.inf)
    np.maximum.at(flat, ri[keep] * n_cols + col[keep], lat["lateness_ns"].to_numpy(dtype=np.float64)[keep])
    mat = flat.reshape(len(ranks), n_cols)
    mat[np.isneginf(mat)] = np.nan
    heads = np.flatnonzero(np.r_[True, col_of_id[1:] != col_of_id[:-1]])
    return mat, ids[heads], ranks
