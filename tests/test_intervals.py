"""Interval algebra against a brute-force reference on a discrete timeline."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzers.timeline import intervals as iv

interval = st.tuples(st.integers(0, 60), st.integers(0, 25)).map(lambda t: (t[0], t[0] + t[1]))
interval_sets = st.lists(interval, max_size=12)


def cover(ivs) -> np.ndarray:
    """Boolean timeline of unit cells [t, t+1) covered by the intervals."""
    line = np.zeros(100, dtype=bool)
    for s, e in ivs:
        line[s:e] = True
    return line


def arrays(ivs):
    return np.array([s for s, _ in ivs], dtype=np.int64), np.array([e for _, e in ivs], dtype=np.int64)


@settings(max_examples=300, deadline=None)
@given(interval_sets)
def test_union_matches_brute_force(ivs):
    s, e = iv.union(*arrays(ivs))
    assert iv.length((s, e)) == cover(ivs).sum()
    # merged: sorted, disjoint, non-adjacent, positive length
    assert np.all(e > s)
    assert np.all(s[1:] > e[:-1])
    assert np.array_equal(cover(zip(s, e, strict=True)), cover(ivs))


@settings(max_examples=300, deadline=None)
@given(interval_sets, interval_sets)
def test_intersection_and_difference(a, b):
    ia, ib = arrays(a), arrays(b)
    inter = iv.intersection(ia, ib)
    diff = iv.difference(ia, ib)
    assert np.array_equal(cover(zip(*inter, strict=True)), cover(a) & cover(b))
    assert np.array_equal(cover(zip(*diff, strict=True)), cover(a) & ~cover(b))
    assert iv.intersection_length(*ia, *ib) == (cover(a) & cover(b)).sum()


@settings(max_examples=200, deadline=None)
@given(interval_sets, st.integers(0, 80), st.integers(0, 40))
def test_clip(ivs, lo, width):
    hi = lo + width
    s, e = iv.clip(*arrays(ivs), lo, hi)
    window = np.zeros(100, dtype=bool)
    window[lo:hi] = True
    assert iv.total_length(s, e) == (cover(ivs) & window).sum()


@settings(max_examples=200, deadline=None)
@given(st.lists(interval_sets, min_size=1, max_size=4), st.integers(1, 3))
def test_covered_by_at_least(groups, k):
    got = iv.covered_by_at_least([arrays(g) for g in groups], k)
    counts = sum(cover(g).astype(int) for g in groups)
    assert np.array_equal(cover(zip(*got, strict=True)), counts >= k)


def test_zero_length_and_touching():
    s, e = iv.union([0, 5, 5, 10], [5, 5, 8, 10])
    assert list(s) == [0] and list(e) == [8]  # touching merge, zero-length dropped
    assert iv.length(iv.union([3], [3])) == 0


def test_gaps():
    s, e = iv.gaps([0, 10, 30], [5, 20, 40])
    assert list(zip(s, e, strict=True)) == [(5, 10), (20, 30)]


@settings(max_examples=300, deadline=None)
@given(interval_sets, interval_sets)
def test_overlaps_any_matches_brute_force(rows, windows):
    """Each row reaches into some window (end > lo and start < hi), windows possibly overlapping."""
    got = iv.overlaps_any(*arrays(rows), *arrays(windows))
    want = [any(e > lo and s < hi for lo, hi in windows) for s, e in rows]
    assert got.tolist() == want


def test_compute_on_two_streams_of_zero_length_kernels_is_zero():
    # a window whose only kernels last 0 ns adds no piece: the sweep has nothing to count (was an IndexError)
    from analyzers.overlap.window_table import _compute_on_two_streams
    from analyzers.timeline.grouped_intervals import _grouped_cumsum

    assert _grouped_cumsum(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)).size == 0
    w, s, e = np.array([0, 0]), np.array([5, 5]), np.array([5, 5])
    assert _compute_on_two_streams(w, np.array([1, 2]), s, e, 1).tolist() == [0]
    # two streams overlapping 3 ns in window 0 (by hand: [2, 5) on both), none in window 1
    w, s, e = np.array([0, 0, 1]), np.array([0, 2, 10]), np.array([5, 9, 12])
    assert _compute_on_two_streams(w, np.array([1, 2, 1]), s, e, 2).tolist() == [3, 0]
