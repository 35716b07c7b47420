"""Interval joins on host ranges: nesting depth, the innermost enclosing range (same thread or any)."""

from __future__ import annotations

import numpy as np
import pandas as pd

# ------------------------------------------------------------------------------------------
# Interval joins on host ranges


def nesting_depth(start: np.ndarray, end: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Depth of each host range on its thread (0 = outermost), by one sweep per all threads.

    At equal times ends sort before starts, so back-to-back ranges are siblings, not nested.
    """
    n = start.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    t = np.concatenate([start, end])
    th = np.concatenate([tid, tid])
    d = np.concatenate([np.ones(n, dtype=np.int64), -np.ones(n, dtype=np.int64)])
    # Longer ranges first among equal starts, so a parent opens before its child.
    length_key = np.concatenate([-(end - start), np.zeros(n, dtype=np.int64)])
    idx = np.concatenate([np.arange(n), np.full(n, -1)])
    order = np.lexsort((length_key, d, t, th))
    th_o, d_o, idx_o = th[order], d[order], idx[order]
    running = np.cumsum(d_o)
    first = np.r_[True, th_o[1:] != th_o[:-1]]
    base = np.maximum.accumulate(np.where(first, np.arange(th_o.size), 0))
    before = np.r_[0, running[:-1]]
    open_before = before - before[base]  # ranges open on this thread before this event
    depth = np.zeros(n, dtype=np.int64)
    is_start = idx_o >= 0
    depth[idx_o[is_start]] = np.maximum(open_before[is_start], 0)
    return depth


def innermost_enclosing(q_start: np.ndarray, q_end: np.ndarray, q_tid: np.ndarray,
                        r_start: np.ndarray, r_end: np.ndarray, r_tid: np.ndarray,
                        q_exclude: np.ndarray | None = None) -> np.ndarray:
    """For each query interval, the index of the innermost range on the same thread that encloses
    it (start <= q_start and end >= q_end), or -1.

    Ranges of one thread at one nesting depth are disjoint, so per depth one backward as-of join
    finds the only candidate; the deepest hit wins. q_exclude (optional) is a range index per
    query that must not be its answer (a host op is not its own caller).
    """
    nq = q_start.size
    out = np.full(nq, -1, dtype=np.int64)
    if nq == 0 or r_start.size == 0:
        return out
    depth = nesting_depth(r_start, r_end, r_tid)
    exclude = q_exclude if q_exclude is not None else np.full(nq, -1, dtype=np.int64)
    queries = pd.DataFrame({"t": q_start.astype(np.int64), "tid": q_tid.astype(np.int64), "q": np.arange(nq)})
    queries = queries.sort_values("t", kind="stable")
    for d in range(int(depth.max()) + 1):
        at = np.flatnonzero(depth == d)
        if at.size == 0:
            continue
        ranges = pd.DataFrame({"t": r_start[at].astype(np.int64), "tid": r_tid[at].astype(np.int64), "r": at})
        ranges = ranges.sort_values("t", kind="stable")
        hit = pd.merge_asof(queries, ranges, on="t", by="tid", direction="backward")
        r = hit["r"].to_numpy(dtype=np.float64)
        q = hit["q"].to_numpy()
        ok = ~np.isnan(r)
        ri = np.where(ok, r, 0).astype(np.int64)
        ok &= (r_end[ri] >= q_end[q]) & (ri != exclude[q])
        out[q[ok]] = ri[ok]
    return out


def innermost_any_thread(q_start: np.ndarray, q_end: np.ndarray,
                         r_start: np.ndarray, r_end: np.ndarray, r_tid: np.ndarray,
                         q_exclude: np.ndarray | None = None) -> np.ndarray:
    """Like innermost_enclosing, but on any thread: each query is tried on every thread at once
    (a cross join of queries x threads), and the deepest, then latest-starting, hit wins."""
    nq = q_start.size
    out = np.full(nq, -1, dtype=np.int64)
    threads = np.unique(r_tid)
    if nq == 0 or threads.size == 0:
        return out
    qs = np.repeat(q_start, threads.size)
    qe = np.repeat(q_end, threads.size)
    qt = np.tile(threads, nq)
    ex = np.repeat(q_exclude, threads.size) if q_exclude is not None else None
    hit = innermost_enclosing(qs, qe, qt, r_start, r_end, r_tid, ex)
    owner = np.repeat(np.arange(nq), threads.size)
    found = hit >= 0
    if not found.any():
        return out
    depth = nesting_depth(r_start, r_end, r_tid)
    cand = pd.DataFrame({"q": owner[found], "r": hit[found], "d": depth[hit[found]], "s": r_start[hit[found]]})
    best = cand.sort_values(["q", "d", "s"], kind="stable").drop_duplicates("q", keep="last")
    out[best["q"].to_numpy()] = best["r"].to_numpy()
    return out
