"""Hover on every kernel at every zoom: an invisible hover point per lane and few-pixel bin of the window.

Plotly shows a tooltip only near a trace's points. A timeline segment is a line with points at its two ends, and
the per-pixel mix (viz/mix.py) is a filled area with none that hover can use, so a long bar answered only at its
left edge after a zoom and a mixed lane not at all. This layer puts one point in every bin (HOVER_BIN_PX wide)
where a lane has activity, naming the activity that covers most of that bin, its category, how many activities
the bin holds and how busy it is. Each re-aggregation (step, window, box selection) makes the bins anew, so any
window the server draws answers at every bin; a zoom in the browser alone keeps them 4 px x its factor apart
(the lane's name is its axis label, so the text is the activity's).
Names go into hover text escaped, as plain text.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from .safe_text import plotly_text
from .timeline import CODES, N_CODES, LaneSegments

HOVER_BIN_PX = 4
MAX_POINTS = 12_000  # per variant: bins widen past this (the payload stays small)
NAME_CHARS = 60


def _bins(v: LaneSegments, width_px: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float, int]:
    """Per (interval in the window, bin it covers): row index, lane, bin, covered ns; the bin width; bins."""
    d = v.data
    lo, hi = v.lo_ns, v.hi_ns
    rows = np.flatnonzero((d.ends > lo) & (d.starts < hi) & (d.groups % N_CODES < CODES.index("overlap")))  # kernels
    lanes = d.groups[rows] // N_CODES
    n_lanes = max(1, len(np.unique(lanes)))
    n_bins = max(1, min(width_px // HOVER_BIN_PX, MAX_POINTS // n_lanes))
    bin_ns = max(1.0, (hi - lo) / n_bins)
    s = np.maximum(d.starts[rows], lo)
    e = np.minimum(d.ends[rows], hi)
    b0 = np.minimum(((s - lo) // bin_ns).astype(np.int64), n_bins - 1)
    b1 = np.minimum(((np.maximum(e - 1, s) - lo) // bin_ns).astype(np.int64), n_bins - 1)
    reps = b1 - b0 + 1
    idx = np.repeat(np.arange(rows.size), reps)
    first = np.repeat(np.cumsum(reps) - reps, reps)
    b = b0[idx] + (np.arange(idx.size) - first)
    cover = np.minimum(e[idx], lo + (b + 1) * bin_ns) - np.maximum(s[idx], lo + b * bin_ns)
    return rows[idx], lanes[idx], b, np.maximum(cover, 0.0), bin_ns, n_bins


def hover_trace(v: LaneSegments, width_px: int, top: int) -> go.Scattergl | None:
    """The invisible hover points of one variant row (y = top - lane, as timeline_figure draws lanes)."""
    d = v.data
    rows, lanes, b, cover, bin_ns, n_bins = _bins(v, width_px)
    if rows.size == 0:
        return None
    key = lanes * n_bins + b
    order = np.lexsort((-cover, key))  # per (lane, bin): the activity covering most of it first
    key_s = key[order]
    starts = np.flatnonzero(np.r_[True, key_s[1:] != key_s[:-1]])
    counts = np.diff(np.r_[starts, key_s.size])
    busy = np.add.reduceat(cover[order], starts)
    top_row = rows[order][starts]
    lane = lanes[order][starts]
    bin_ = b[order][starts]
    codes = d.groups[top_row] % N_CODES
    name_i = d.name_idx[top_row]
    names = np.asarray(d.name_list + [""], dtype=object)[np.where(name_i >= 0, name_i, len(d.name_list))]
    dur = (d.ends[top_row] - d.starts[top_row]) / 1e6
    text = [
        (f"<b>{plotly_text(str(n)[:NAME_CHARS])}</b><br>" if n else "")
        + f"{CODES[int(c)].replace('_', ' ')} · {dt:.4f} ms long<br>{int(k)} activit{'y' if k == 1 else 'ies'} in "
          f"this {bin_ns / 1e3:,.2f} µs, busy {min(100.0, 100 * bz / bin_ns):.0f}%"
        for n, c, dt, k, bz in zip(names, codes, dur, counts, busy, strict=True)]
    x = (v.lo_ns + (bin_ + 0.5) * bin_ns - v.origin_ns) / 1e6
    return go.Scattergl(x=x.astype(np.float32), y=(top - lane).astype(np.float32), mode="markers",
                        marker=dict(size=max(4, HOVER_BIN_PX * 2), opacity=0), text=text,
                        hovertemplate="%{text}<extra></extra>", name="hover", showlegend=False,
                        hoverlabel=dict(namelength=0))
