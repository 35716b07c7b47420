"""The timeline is true to time at any zoom: per pixel, each category's share (viz/mix.py).

Random interval sets: the time each category covers per pixel bin matches a brute-force union, and
the area the figure fills for each category, divided by its sub-lane height, is the category's time
on that lane within a pixel's time; no two categories share a sub-lane, so none hides another.
"""

from __future__ import annotations

import numpy as np
import pytest

from analyzers.timeline import intervals as iv
from analyzers.timeline.model import TraceSet
from viz.figures import MIX_ORDER, timeline_figure
from viz.lod import sort_for_lod
from viz.mix import mix_polygons, pixel_mix, polygon_area
from viz.timeline import CODE, CODES, N_CODES, lod_for_windows, prepare_timeline

from .synth import COMM, GEMM, rank_trace


def _random_set(rng: np.random.Generator, n: int, t_max: int, groups: int):
    s = rng.integers(0, t_max, n)
    e = s + rng.integers(1, t_max // 50, n)
    g = rng.integers(0, groups, n)
    return s.astype(np.int64), e.astype(np.int64), g.astype(np.int64)


@pytest.mark.parametrize("seed", range(6))
def test_pixel_mix_matches_a_brute_force_union(seed):
    rng = np.random.default_rng(seed)
    s, e, g = _random_set(rng, 400, 1_000_000, 5)
    o = sort_for_lod(s, e, g)
    lo, hi, bins = int(rng.integers(0, 300_000)), int(rng.integers(600_000, 1_100_000)), int(rng.integers(7, 300))
    mix = pixel_mix(s[o], e[o], g[o], lo, hi, bins)
    for i, grp in enumerate(mix.groups):
        u = iv.union(s[g == grp], e[g == grp])
        for b in range(bins):
            a, z = mix.edges[b], mix.edges[b + 1]
            assert mix.covered[i, b] == iv.length(iv.clip(*u, a, z))


@pytest.mark.parametrize("seed", range(6))
def test_drawn_area_per_category_is_its_time(seed):
    rng = np.random.default_rng(100 + seed)
    n_lanes, t_max, bins = 4, 5_000_000, 160
    s, e, lane = _random_set(rng, 3_000, t_max, n_lanes)
    code = rng.choice([CODE["comm"], CODE["compute"], CODE["copy"]], len(s))
    g = lane * N_CODES + code
    o = sort_for_lod(s, e, g)
    lo, hi = 0, t_max
    mix = pixel_mix(s[o], e[o], g[o], lo, hi, bins)
    poly = mix_polygons(mix, N_CODES, n_lanes - 1, [CODE[c] for c in MIX_ORDER])
    pixel = (hi - lo) / bins
    for c in poly.x:
        expected = 0.0
        for ln in range(n_lanes):
            sel = (lane == ln) & (code == c)
            if not sel.any():
                continue
            expected += iv.length(iv.clip(*iv.union(s[sel], e[sel]), lo, hi)) * poly.sub_height[ln]
        area = polygon_area(poly.x[c], poly.y[c])
        assert area == pytest.approx(expected, rel=1e-9)  # exact: far inside a pixel's error
        assert abs(area - expected) <= pixel * min(poly.sub_height.values())
    # sub-lanes of one lane never overlap: each category has its own band of y
    for ln in range(n_lanes):
        present = sorted({int(c) for c in code[lane == ln]})
        assert poly.sub_height[ln] == pytest.approx(0.8 / len(present))


def test_figure_shows_both_categories_of_a_dense_lane():
    # One stream alternates 1 µs of communication and 1 µs of compute, 20,000 times: 20 ms each.
    # Whole-trace view at 400 px: each pixel holds 100 µs of both. Merged segments would paint the lane
    # one colour; the mix paints both halves in proportion.
    ks = []
    for i in range(20_000):
        t = i * 2_000
        ks.append((t, t + 1_000, 7, COMM))
        ks.append((t + 1_000, t + 2_000, 7, GEMM))
    ts = TraceSet(ranks={0: rank_trace(ks)}, label="dense")
    d = prepare_timeline(ts, syncs=None)
    segs = lod_for_windows([d], [(d.t_min, d.t_min, d.t_max)], width_px=400)
    fig = timeline_figure(segs, width_px=400)
    filled = {t.name: polygon_area(np.asarray(t.x, dtype=np.float64), np.asarray(t.y, dtype=np.float64))
              for t in fig.data if t.type == "scattergl" and t.fill == "toself"}
    # 20 ms each on the stream lane, split in two sub-lanes of 0.4: 8 ms-lane units each
    assert filled["communication"] == pytest.approx(20 * 0.4, rel=1e-4)
    assert filled["compute"] == pytest.approx(20 * 0.4, rel=1e-4)
    # the band lane: comm never overlaps compute here, so it is all exposed (one sub-lane of 0.8)
    assert "overlap (comm ∩ compute)" not in filled
    assert filled["exposed communication"] == pytest.approx(20 * 0.8, rel=1e-4)
    assert {CODES[c] for c in (CODE["comm"], CODE["compute"])} <= set(MIX_ORDER)


def test_fine_zoom_keeps_named_segments():
    # look-alike: a window where every kernel is wider than a pixel draws plain segments with names
    ts = TraceSet(ranks={0: rank_trace([(0, 400_000, 7, COMM), (400_000, 1_000_000, 7, GEMM)])}, label="wide")
    d = prepare_timeline(ts, syncs=None)
    fig = timeline_figure(lod_for_windows([d], [(0, 0, 1_000_000)], width_px=500), width_px=500)
    assert not any(t.type == "scattergl" and t.fill == "toself" for t in fig.data)
    assert any(t.text is not None and any("ncclDevKernel" in str(x) for x in t.text) for t in fig.data)
