"""Level of detail for timelines: never ship more segments than the screen can show.

A browser cannot draw a million kernels interactively, and it does not need to: at a given
zoom, everything closer together than one pixel looks like one bar. So, per group (a lane
and a colour), intervals whose gap to everything before them is below the merge threshold
become one segment; the threshold is one pixel of the visible window, raised just enough
that the total never exceeds a segment budget (~100k). One threshold for all groups keeps
the resolution uniform across lanes.

Everything is vectorized numpy: groups are kept apart by offsetting each group's times by
a stride larger than the window, so a single running maximum serves all groups at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_MAX_SEGMENTS = 100_000
DEFAULT_WIDTH_PX = 1600


@dataclass
class Segments:
    """Merged segments, sorted by (group, start).

    start/end: the merged extent (ns); group: the input group id; count: how many input
    intervals each segment stands for; busy: time covered inside it (overlaps once);
    first: index (into the input arrays) of the segment's first interval, so callers can
    look up a name or other attribute of single-interval segments.
    threshold_ns: the gap below which intervals were merged (>= one pixel).
    """

    start: np.ndarray
    end: np.ndarray
    group: np.ndarray
    count: np.ndarray
    busy: np.ndarray
    first: np.ndarray
    threshold_ns: int
    n_input: int

    def __len__(self) -> int:
        return int(self.start.size)


def pixel_ns(lo: int, hi: int, width_px: int) -> int:
    """Nanoseconds one pixel stands for when [lo, hi) fills width_px pixels (at least 1)."""
    if width_px <= 0:
        raise ValueError("width_px must be positive")
    return max(1, int(np.ceil((int(hi) - int(lo)) / width_px)))


def sort_for_lod(starts: np.ndarray, ends: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The order (group, start, end) that `lod_segments(..., presorted=True)` expects.

    Computing it once per trace and reusing it keeps each re-aggregation sort-free.
    """
    return np.lexsort((np.asarray(ends), np.asarray(starts), np.asarray(groups)))


def _empty(n_input: int, threshold: int) -> Segments:
    z = np.zeros(0, dtype=np.int64)
    return Segments(z, z.copy(), z.copy(), z.copy(), z.copy(), z.copy(), threshold, n_input)


def lod_segments(
    starts: np.ndarray,
    ends: np.ndarray,
    groups: np.ndarray,
    lo: int | None = None,
    hi: int | None = None,
    *,
    width_px: int = DEFAULT_WIDTH_PX,
    max_segments: int = DEFAULT_MAX_SEGMENTS,
    min_gap_ns: int | None = None,
    presorted: bool = False,
) -> Segments:
    """Clip intervals to [lo, hi) and merge, per group, those closer than one pixel.

    starts/ends: int64 ns; groups: integer group ids (lane x colour). With presorted=True
    the input must already be ordered by (group, start) (see sort_for_lod) and no sort is done.
    min_gap_ns overrides the one-pixel threshold (tests, or a caller that knows its scale).
    The result has at most max(max_segments, number of non-empty groups) segments.
    """
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    g = np.asarray(groups, dtype=np.int64)
    n_input = int(s.size)
    if s.size == 0:
        return _empty(0, 1)
    lo_v = int(s.min()) if lo is None else int(lo)
    hi_v = int(e.max()) if hi is None else int(hi)
    threshold = max(1, int(min_gap_ns)) if min_gap_ns is not None else pixel_ns(lo_v, hi_v, width_px)
    if hi_v <= lo_v:
        return _empty(n_input, threshold)

    idx = np.arange(s.size, dtype=np.int64)
    if not presorted:
        idx = sort_for_lod(s, e, g)
        s, e, g = s[idx], e[idx], g[idx]
    # Clip to the window; zero-length activities inside it stay (a marker is still news).
    inside = (e > lo_v) & (s < hi_v) | ((s == e) & (s >= lo_v) & (s < hi_v))
    s, e, g, idx = s[inside], e[inside], g[inside], idx[inside]
    if s.size == 0:
        return _empty(n_input, threshold)
    s = np.maximum(s, lo_v) - lo_v  # relative times: small, so group offsets cannot overflow
    e = np.minimum(e, hi_v) - lo_v

    # Dense group index, then one running max over all groups kept apart by a stride.
    new_group = np.empty(s.size, dtype=bool)
    new_group[0] = True
    new_group[1:] = g[1:] != g[:-1]
    dense = np.cumsum(new_group) - 1
    stride = np.int64(hi_v - lo_v + 1)
    run_end = np.maximum.accumulate(e + dense * stride) - dense * stride

    # Gap of each interval to everything before it in its group (first of a group: +inf).
    gap = np.empty(s.size, dtype=np.int64)
    gap[0] = 0
    gap[1:] = s[1:] - run_end[:-1]
    n_groups = int(new_group.sum())

    # Raise the threshold just enough to respect the segment budget.
    candidates = gap[~new_group]
    budget = max(0, int(max_segments) - n_groups)
    if int((candidates >= threshold).sum()) > budget:
        if budget == 0:
            threshold = np.iinfo(np.int64).max
        else:
            # The (budget+1)-th largest gap must merge: threshold just above it.
            kth = np.partition(candidates, candidates.size - budget - 1)[candidates.size - budget - 1]
            threshold = max(threshold, int(kth) + 1)

    begins = new_group | (gap >= threshold)
    first = np.flatnonzero(begins)
    last = np.r_[first[1:] - 1, s.size - 1]
    # Time each interval adds to the union: from max(its start, end so far) to the new end so far.
    prev_end = np.empty(s.size, dtype=np.int64)
    prev_end[0] = s[0]
    prev_end[1:] = run_end[:-1]
    prev_end[new_group] = s[new_group]
    added = run_end - np.maximum(s, prev_end)
    busy = np.add.reduceat(added, first) if first.size else np.zeros(0, dtype=np.int64)
    return Segments(
        start=s[first] + lo_v,
        end=run_end[last] + lo_v,
        group=g[first],
        count=np.diff(np.r_[first, s.size]).astype(np.int64),
        busy=busy.astype(np.int64),
        first=idx[first],
        threshold_ns=int(min(threshold, np.iinfo(np.int64).max)),
        n_input=n_input,
    )
