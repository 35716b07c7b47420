"""The timeline at coarse zoom, drawn true to time: per pixel, each category's share of it.

Merging intervals closer than a pixel (viz/lod.py) makes a readable picture, but a merged bar is
drawn as wide as its extent, and on a lane where communication and compute alternate faster than a
pixel, whichever is drawn last covers the other: a run that is 31 % overlapped looks all exposed.
So when a window has intervals below a pixel, each lane is split into one thin sub-lane per category
it holds, and each sub-lane is filled, pixel bin by pixel bin, to the fraction of that bin the
category covers (its union, so concurrent kernels of one category count once). The filled area of a
category is then its time in the window times the sub-lane's height, exactly (up to the float32 of
the coordinates), and no category can hide another; tests/test_timeline_mix.py checks this on random
interval sets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .lod import Segments


@dataclass
class PixelMix:
    """Covered time per (group, pixel bin) of one window: groups are lane * N_CODES + code."""

    groups: np.ndarray  # int64, the groups present in the window, ascending
    edges: np.ndarray  # int64 ns, n_bins + 1 bin edges from lo to hi
    covered: np.ndarray  # int64 ns, groups x bins: time of the group's union inside each bin


def pixel_mix(starts: np.ndarray, ends: np.ndarray, groups: np.ndarray, lo: int, hi: int, n_bins: int) -> PixelMix:
    """Per group, the time its intervals (union) cover in each of n_bins equal bins of [lo, hi).

    Input sorted by (group, start) (viz/timeline.py keeps it so). Vectorized over all groups: each
    group's times are offset by a stride wider than the window, so one running maximum merges every
    group, and one searchsorted reads the running covered time at every bin edge of every group.
    """
    n_bins = max(1, int(n_bins))
    lo, hi = int(lo), int(hi)
    edges = lo + (np.arange(n_bins + 1, dtype=np.int64) * (hi - lo)) // n_bins
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    g = np.asarray(groups, dtype=np.int64)
    inside = (e > lo) & (s < hi) & (e > s)
    s, e, g = np.maximum(s[inside], lo) - lo, np.minimum(e[inside], hi) - lo, g[inside]
    present = np.unique(g)
    if not len(present) or hi <= lo:
        return PixelMix(present, edges, np.zeros((len(present), n_bins), dtype=np.int64))
    dense = np.searchsorted(present, g)
    stride = np.int64(hi - lo + 1)
    order = np.lexsort((s, dense))
    s, e, dense = s[order] + dense[order] * stride, e[order] + dense[order] * stride, dense[order]
    run_end = np.maximum.accumulate(e)
    begins = np.r_[True, s[1:] > run_end[:-1]]
    first = np.flatnonzero(begins)
    ms = s[first]
    me = run_end[np.r_[first[1:] - 1, len(s) - 1]]
    before = np.r_[0, np.cumsum(me - ms)].astype(np.int64)
    at = (edges - lo)[None, :] + (np.arange(len(present), dtype=np.int64) * stride)[:, None]
    k = np.searchsorted(ms, at, side="right") - 1
    kc = np.maximum(k, 0)
    cum = np.where(k >= 0, before[kc] + np.clip(at - ms[kc], 0, me[kc] - ms[kc]), 0)
    return PixelMix(present, edges, np.diff(cum, axis=1))


def needs_mix(seg: Segments, pixel_ns: int) -> bool:
    """True when plain segments would not be true to time: one stands for several intervals, or is
    narrower than a pixel (drawn a pixel wide)."""
    return bool(len(seg)) and bool((seg.count > 1).any() or ((seg.end - seg.start) < pixel_ns).any())


@dataclass
class MixPolygons:
    """Per code, the filled outlines (x in ns, y in lane units) separated by NaN, ready for a fill."""

    x: dict[int, np.ndarray]
    y: dict[int, np.ndarray]
    sub_height: dict[int, float]  # per lane: the height of each of its sub-lanes


def mix_polygons(mix: PixelMix, n_codes: int, top: int, draw_order: list[int], lane_height: float = 0.8
                 ) -> MixPolygons:
    """Sub-lane outlines: lane L is centred at y = top - L; its codes (in draw_order, bottom up) share
    lane_height equally; each sub-lane is a step outline of height fraction x sub-lane height."""
    xs: dict[int, list[np.ndarray]] = {}
    ys: dict[int, list[np.ndarray]] = {}
    sub: dict[int, float] = {}
    width = np.diff(mix.edges).astype(np.float64)
    rank_of = {c: i for i, c in enumerate(draw_order)}
    lanes = mix.groups // n_codes
    for lane in np.unique(lanes):
        rows = np.flatnonzero(lanes == lane)
        codes = sorted((int(mix.groups[i] % n_codes) for i in rows), key=lambda c: rank_of.get(c, -1))
        h = lane_height / len(codes)
        sub[int(lane)] = h
        base = (top - int(lane)) - lane_height / 2
        for j, code in enumerate(codes):
            i = rows[[int(mix.groups[r] % n_codes) for r in rows].index(code)]
            frac = np.divide(mix.covered[i], width, out=np.zeros(len(width)), where=width > 0)
            runs = np.flatnonzero(np.r_[True, frac[1:] != frac[:-1]])  # bins of equal fraction: one step
            run_edges = np.r_[mix.edges[runs], mix.edges[-1]]
            y0 = base + j * h
            x_pts = np.r_[run_edges[0], np.repeat(run_edges, 2)[1:-1], run_edges[-1], np.nan]
            y_pts = np.r_[y0, np.repeat(y0 + frac[runs] * h, 2), y0, np.nan]
            xs.setdefault(code, []).append(x_pts.astype(np.float64))
            ys.setdefault(code, []).append(y_pts)
    return MixPolygons({c: np.concatenate(v) for c, v in xs.items()},
                       {c: np.concatenate(v) for c, v in ys.items()}, sub)


def polygon_area(x: np.ndarray, y: np.ndarray) -> float:
    """Total area of NaN-separated closed outlines (shoelace): what a fill='toself' trace paints."""
    cuts = np.flatnonzero(np.isnan(x))
    total, start = 0.0, 0
    for c in [*cuts.tolist(), len(x)]:
        px, py = x[start:c].astype(np.float64), y[start:c].astype(np.float64)
        if len(px) >= 3:
            total += abs(float(np.dot(px, np.roll(py, -1)) - np.dot(py, np.roll(px, -1)))) / 2
        start = c + 1
    return total
