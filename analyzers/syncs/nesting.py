"""Interval joins on host ranges: nesting depth, the innermost enclosing range (same thread or any).

The host-op table is sorted once (RangeIndex); each subset of it (callers, sync ops, annotations,
frames) is then a filter of that order, so asking four questions about one rank's host ops costs
one sort, not four sweeps and a merge per nesting depth each.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def _stable_by_small_int(values: np.ndarray) -> np.ndarray:
    """Stable argsort of small non-negative ints (radix sort when they fit in 16 bits)."""
    if values.size and int(values.max()) < np.iinfo(np.int16).max:
        values = values.astype(np.int16)
    return np.argsort(values, kind="stable")


class RangeIndex:
    """Host ranges (start, end, tid) sorted once for depth and innermost-enclosing queries on any
    subset of them (a boolean mask over the ranges)."""

    def __init__(self, start: np.ndarray, end: np.ndarray, tid: np.ndarray) -> None:
        self.start = np.asarray(start, dtype=np.int64)
        self.end = np.asarray(end, dtype=np.int64)
        self.tid = np.asarray(tid, dtype=np.int64)
        n = self.start.size
        self.n = n
        self._tid_code, self.threads = pd.factorize(self.tid, sort=True)
        self._tid_code = self._tid_code.astype(np.int64)
        order = _sweep_order(self.start, self.end, self._tid_code)
        self._ev_range = np.where(order < n, order, order - n)
        self._ev_sign = np.where(order < n, 1, -1).astype(np.int8)
        # Ranges by (thread, start), ties in range order: the as-of join order of each subset.
        self._by_tid_start = np.lexsort((self.start, self._tid_code))
        # Start ranks (equal starts share the first one's): "start <= t" is "rank <= searchsorted(t,
        # right) - 1". Stable sorts: host ops mostly come sorted, and then they cost a pass.
        by_start = np.argsort(self.start, kind="stable")
        self._starts_sorted = self.start[by_start]
        first = np.r_[True, self._starts_sorted[1:] != self._starts_sorted[:-1]] if n else np.zeros(0, dtype=bool)
        self._start_rank = np.empty(n, dtype=np.int64)
        self._start_rank[by_start] = np.maximum.accumulate(np.where(first, np.arange(n), 0)) if n else 0

    def _mask(self, mask: np.ndarray | None) -> np.ndarray:
        return np.ones(self.n, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)

    def depth(self, mask: np.ndarray | None = None) -> np.ndarray:
        """Depth of each range of the subset on its thread among the subset (0 = outermost); 0
        outside the subset."""
        mask = self._mask(mask)
        keep = mask[self._ev_range]
        rng, sign = self._ev_range[keep], self._ev_sign[keep]
        # Ranges open before each event. Every range opens and closes on its own thread, so the
        # running count is back to 0 where one thread's events end and the next thread's begin.
        open_before = np.cumsum(sign, dtype=np.int64) - sign
        is_start = sign > 0
        out = np.zeros(self.n, dtype=np.int64)
        out[rng[is_start]] = np.maximum(open_before[is_start], 0)
        return out

    def innermost(self, q_start: np.ndarray, q_end: np.ndarray, q_tid: np.ndarray | None,
                  q_exclude: np.ndarray | None = None, mask: np.ndarray | None = None,
                  any_thread: bool = False) -> np.ndarray:
        """Index of the innermost range of the subset enclosing each query (start <= q_start and
        end >= q_end) on the query's thread (q_tid None: on no thread of its own), or -1; q_exclude: a
        range per query that must not be its answer. With any_thread, queries with no answer on
        their thread are tried on every thread of the subset, the deepest, then latest-starting, hit
        (then the highest thread) winning.

        Per nesting depth, ranges of one thread are disjoint, so the only candidate at a depth is
        the last range of that depth starting at or before the query (ties: the later range); the
        deepest candidate that encloses the query wins.
        """
        mask = self._mask(mask)
        q_start = np.asarray(q_start, dtype=np.int64)
        q_end = np.asarray(q_end, dtype=np.int64)
        nq = q_start.size
        exclude = (np.full(nq, -1, dtype=np.int64) if q_exclude is None
                   else np.asarray(q_exclude, dtype=np.int64))
        out = np.full(nq, -1, dtype=np.int64)
        if nq == 0 or not mask.any():
            return out
        depth = self.depth(mask)
        table = _Table(self, mask, depth)
        if q_tid is not None:
            q_tid = np.asarray(q_tid, dtype=np.int64)
            code = np.searchsorted(self.threads, q_tid)
            code_c = np.clip(code, 0, self.threads.size - 1)
            out = table.lookup(q_start, q_end, np.where(self.threads[code_c] == q_tid, code_c, -1), exclude)
        if not any_thread or (out >= 0).all():
            return out
        miss = np.flatnonzero(out < 0)
        threads = np.unique(self._tid_code[mask])
        owner = np.repeat(miss, threads.size)
        hit = table.lookup(q_start[owner], q_end[owner], np.tile(threads, miss.size), exclude[owner])
        found = hit >= 0
        if found.any():
            q, r = owner[found], hit[found]
            order = np.lexsort((self.start[r], depth[r], q))  # stable: the later pair wins ties
            q, r = q[order], r[order]
            last = np.r_[q[1:] != q[:-1], True]
            out[q[last]] = r[last]
        return out


def _sweep_order(start: np.ndarray, end: np.ndarray, thread: np.ndarray) -> np.ndarray:
    """Start (0..n-1) and end (n..2n-1) events in sweep order per thread: by time, ends before
    starts at equal times (back-to-back ranges are siblings), longer ranges first among equal
    starts (a parent opens before its child), then in range order. A subset's sweep is this order
    filtered: a stable sort keeps the relative order of the elements it keeps.

    Ends are laid out first, so one stable sort by (thread, time) gets all that right but the
    length order of starts at one time; those (few) runs are sorted again on their own. Host
    ops come nearly sorted by time, where this costs a pass, not a full sort per key.
    """
    n = start.size
    ev = np.r_[np.arange(n, 2 * n), np.arange(n)]
    t = np.r_[end, start]
    th = np.r_[thread, thread]
    th = th.astype(np.int16) if n and thread.max() < np.iinfo(np.int16).max else th
    order = ev[np.lexsort((t, th))]
    # runs of starts at one (thread, time): order them by length (longest first), then range
    is_start = order < n
    t_o, th_o = np.r_[start, end][order], np.r_[thread, thread][order]
    tied = is_start[1:] & is_start[:-1] & (t_o[1:] == t_o[:-1]) & (th_o[1:] == th_o[:-1])
    if tied.any():
        at = np.flatnonzero(np.r_[tied, False] | np.r_[False, tied])  # positions in a run
        run = np.cumsum(np.r_[True, ~tied])[at]  # run id of each
        r = order[at]
        order[at] = r[np.lexsort((r, -(end[r] - start[r]), run))]
    return order


class _Table:
    """One subset's ranges sorted by (depth, thread, start), keyed for one searchsorted per query and
    depth: key = dense (depth, thread) group * K + start rank."""

    def __init__(self, index: RangeIndex, mask: np.ndarray, depth: np.ndarray) -> None:
        rows = index._by_tid_start[mask[index._by_tid_start]]
        rows = rows[_stable_by_small_int(depth[rows])]
        self.index, self.rows = index, rows
        self.n_threads = max(index.threads.size, 1)
        self.max_depth = int(depth[rows].max())
        group_code = depth[rows] * self.n_threads + index._tid_code[rows]
        new = np.r_[True, group_code[1:] != group_code[:-1]]
        self.groups = group_code[new]
        self.group_of = np.cumsum(new) - 1
        self.k = index._starts_sorted.size + 1
        self.keys = self.group_of * self.k + index._start_rank[rows]

    def lookup(self, q_start: np.ndarray, q_end: np.ndarray, code: np.ndarray, exclude: np.ndarray) -> np.ndarray:
        """Per query (thread code, -1 for a thread the subset lacks): the deepest enclosing range."""
        nq, nd = q_start.size, self.max_depth + 1
        out = np.full(nq, -1, dtype=np.int64)
        if nq == 0:
            return out
        q_rank = np.searchsorted(self.index._starts_sorted, q_start, side="right") - 1
        step = max(1, _PAIRS_AT_ONCE // nq)  # (query, depth) pairs per pass: memory stays bounded
        for d0 in range(0, nd, step):  # shallow to deep: a deeper hit overwrites
            q, r = self._hits(np.arange(d0, min(d0 + step, nd), dtype=np.int64), q_rank, q_end, code, exclude)
            last = np.r_[q[1:] != q[:-1], True] if q.size else np.zeros(0, dtype=bool)
            out[q[last]] = r[last]
        return out

    def _hits(self, depths: np.ndarray, q_rank: np.ndarray, q_end: np.ndarray, code: np.ndarray,
              exclude: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(query, range) for each query and depth whose candidate encloses the query, by query then depth."""
        q = np.repeat(np.arange(q_rank.size), depths.size)
        d = np.tile(depths, q_rank.size)
        gc = d * self.n_threads + code[q]
        g = np.clip(np.searchsorted(self.groups, gc), 0, self.groups.size - 1)
        ok = (code[q] >= 0) & (self.groups[g] == gc)
        pos = np.searchsorted(self.keys, g * self.k + q_rank[q], side="right") - 1
        pos_c = np.clip(pos, 0, self.rows.size - 1)
        ok &= (pos >= 0) & (self.group_of[pos_c] == g)
        r = self.rows[pos_c]
        ok &= (self.index.end[r] >= q_end[q]) & (r != exclude[q])
        return q[ok], r[ok]


_PAIRS_AT_ONCE = 1 << 20


def nesting_depth(start: np.ndarray, end: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Depth of each host range on its thread (0 = outermost), by one sweep per all threads.

    At equal times ends sort before starts, so back-to-back ranges are siblings, not nested.
    """
    if np.asarray(start).size == 0:
        return np.zeros(0, dtype=np.int64)
    return RangeIndex(start, end, tid).depth()


def innermost_enclosing(q_start: np.ndarray, q_end: np.ndarray, q_tid: np.ndarray,
                        r_start: np.ndarray, r_end: np.ndarray, r_tid: np.ndarray,
                        q_exclude: np.ndarray | None = None) -> np.ndarray:
    """For each query interval, the index of the innermost range on the same thread that encloses
    it (start <= q_start and end >= q_end), or -1.

    Ranges of one thread at one nesting depth are disjoint, so per depth one backward as-of join
    finds the only candidate; the deepest hit wins. q_exclude (optional) is a range index per
    query that must not be its answer (a host op is not its own caller).
    """
    if np.asarray(q_start).size == 0 or np.asarray(r_start).size == 0:
        return np.full(np.asarray(q_start).size, -1, dtype=np.int64)
    return RangeIndex(r_start, r_end, r_tid).innermost(q_start, q_end, q_tid, q_exclude)


def innermost_any_thread(q_start: np.ndarray, q_end: np.ndarray,
                         r_start: np.ndarray, r_end: np.ndarray, r_tid: np.ndarray,
                         q_exclude: np.ndarray | None = None) -> np.ndarray:
    """Like innermost_enclosing, but on any thread: each query is tried on every thread at once
    (a cross join of queries x threads), and the deepest, then latest-starting, hit wins."""
    nq = np.asarray(q_start).size
    if nq == 0 or np.asarray(r_start).size == 0:
        return np.full(nq, -1, dtype=np.int64)
    return RangeIndex(r_start, r_end, r_tid).innermost(q_start, q_end, None, q_exclude, any_thread=True)
