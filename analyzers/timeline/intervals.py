"""Vectorized interval algebra on int64 nanosecond arrays.

An interval set is a pair of int64 arrays (starts, ends), half-open [s, e). "Merged" sets
are sorted, disjoint and non-adjacent; every function here accepts unmerged input unless
its name says otherwise and returns merged output. Zero-length intervals are dropped by
union: they cover no time. No Python loops over rows: sort, running max, cumulative sums.
"""

from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]

_EMPTY = np.zeros(0, dtype=np.int64)


def empty() -> Intervals:
    return _EMPTY.copy(), _EMPTY.copy()


def as_intervals(starts: object, ends: object) -> Intervals:
    s = np.asarray(starts, dtype=np.int64).ravel()
    e = np.asarray(ends, dtype=np.int64).ravel()
    if s.shape != e.shape:
        raise ValueError("starts and ends differ in length")
    return s, e


def union(starts: object, ends: object) -> Intervals:
    """Merge intervals: overlapping or touching ones become one; time covered counted once."""
    s, e = as_intervals(starts, ends)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return empty()
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_max = np.maximum.accumulate(e)
    # A new merged interval starts where the start is beyond everything seen so far.
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_max[:-1]
    first = np.flatnonzero(new)
    last = np.empty_like(first)
    last[:-1] = first[1:] - 1
    last[-1] = s.size - 1
    return s[first], run_max[last]


def total_length(starts: object, ends: object) -> int:
    """Time covered by the set (overlaps counted once)."""
    s, e = union(starts, ends)
    return int((e - s).sum())


def _sweep(sets: list[Intervals]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Elementary segments between consecutive boundaries with a bitmask of covering sets.

    Each input set is merged first, so the mask bit i is exactly "inside set i".
    Returns (seg_start, seg_end, mask) for segments of positive length.
    """
    bounds, deltas = [], []
    for i, (s, e) in enumerate(sets):
        ms, me = union(s, e)
        w = np.int64(1 << i)
        bounds += [ms, me]
        deltas += [np.full(ms.size, w, dtype=np.int64), np.full(me.size, -w, dtype=np.int64)]
    if not bounds:
        return _EMPTY, _EMPTY, _EMPTY
    t = np.concatenate(bounds)
    d = np.concatenate(deltas)
    if t.size == 0:
        return _EMPTY, _EMPTY, _EMPTY
    order = np.argsort(t, kind="stable")
    t, d = t[order], d[order]
    mask = np.cumsum(d)
    seg_s, seg_e, seg_m = t[:-1], t[1:], mask[:-1]
    pos = seg_e > seg_s
    return seg_s[pos], seg_e[pos], seg_m[pos]


def _segments_where(sets: list[Intervals], predicate) -> Intervals:
    s, e, m = _sweep(sets)
    sel = predicate(m)
    return union(s[sel], e[sel])


def intersection(a: Intervals, b: Intervals) -> Intervals:
    """Time inside both sets."""
    return _segments_where([a, b], lambda m: m == 3)


def intersection_length(a_s: object, a_e: object, b_s: object, b_e: object) -> int:
    s, e = intersection(as_intervals(a_s, a_e), as_intervals(b_s, b_e))
    return int((e - s).sum())


def difference(a: Intervals, b: Intervals) -> Intervals:
    """Time inside a and not inside b."""
    return _segments_where([a, b], lambda m: m == 1)


def clip(starts: object, ends: object, lo: int, hi: int) -> Intervals:
    """Restrict intervals to the window [lo, hi); intervals wholly outside are dropped."""
    s, e = as_intervals(starts, ends)
    cs = np.clip(s, lo, hi)
    ce = np.clip(e, lo, hi)
    keep = ce > cs
    return cs[keep], ce[keep]


def covered_by_at_least(groups: list[Intervals], k: int) -> Intervals:
    """Time during which at least k of the groups are active (each group merged first).

    Used for compute/compute overlap across streams: k=2 over per-stream compute sets.
    """
    bounds, deltas = [], []
    for s, e in groups:
        ms, me = union(s, e)
        bounds += [ms, me]
        deltas += [np.ones(ms.size, dtype=np.int64), -np.ones(me.size, dtype=np.int64)]
    if not bounds:
        return empty()
    t = np.concatenate(bounds)
    d = np.concatenate(deltas)
    if t.size == 0:
        return empty()
    # Ends sort before starts at equal times so touching intervals do not count as overlap.
    order = np.lexsort((d, t))
    t, d = t[order], d[order]
    count = np.cumsum(d)
    seg_s, seg_e, c = t[:-1], t[1:], count[:-1]
    sel = (c >= k) & (seg_e > seg_s)
    return union(seg_s[sel], seg_e[sel])


def length(iv: Intervals) -> int:
    return int((iv[1] - iv[0]).sum())


def gaps(starts: object, ends: object) -> Intervals:
    """Idle gaps between merged busy intervals (not before the first or after the last)."""
    s, e = union(starts, ends)
    if s.size < 2:
        return empty()
    return e[:-1].copy(), s[1:].copy()


def overlaps_any(starts: object, ends: object, win_lo: object, win_hi: object) -> np.ndarray:
    """For each interval [start, end): whether it reaches into some window [lo, hi) (end > lo and
    start < hi, as RankView.in_range has it).

    One searchsorted over the windows sorted by lo and a prefix max of their ends: O((n + w) log w),
    not n x w, so a selection of thousands of steps stays cheap on millions of kernels.
    """
    s, e = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    lo, hi = np.asarray(win_lo, dtype=np.int64), np.asarray(win_hi, dtype=np.int64)
    if lo.size == 0:
        return np.zeros(s.size, dtype=bool)
    order = np.argsort(lo, kind="stable")
    lo_sorted, hi_reach = lo[order], np.maximum.accumulate(hi[order])
    k = np.searchsorted(lo_sorted, e, side="left") - 1  # windows starting before the interval ends
    return (k >= 0) & (hi_reach[np.clip(k, 0, None)] > s)
