"""Hover on every kernel at every zoom: one invisible heatmap row per lane whose cells are the lane's activities.

Plotly answers a heatmap's hover anywhere inside a cell, from the data alone: at any zoom the browser makes on
its own (drag, scroll, no server round trip) the mouse anywhere over a kernel names it, not only near a point,
and the row is drawn as one image, whatever its cell count. Each cell is one activity of the window (a kernel,
a copy, an overlap or exposed-communication band), except that a run of consecutive activities each narrower
than a pixel of the window the server drew becomes one cell that says how many it holds and names the longest:
a box selection re-aggregates that range at full detail and splits them. Where a lane's activities overlap in
time, a cell starts where the lane's cells before it end, so no cell hides another. Host syncs are not cells:
their markers carry their own tooltips (viz/sync_markers.py). Names go into hover text escaped, as plain text.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from .safe_text import plotly_text
from .timeline import CODE, CODES, N_CODES, LaneSegments

MAX_CELLS = 12_000  # per variant: past this, runs of sub-pixel activities merge at a coarser pixel
NAME_CHARS = 60
HOVER_MIN_PX = 3
WORDS = {"other": "other", "memset": "memset", "copy": "copy", "compute": "compute", "comm": "communication",
         "overlap": "overlap (communication hidden by compute)", "exposed_comm": "exposed communication"}
_TRANSPARENT = [[0.0, "rgba(0,0,0,0)"], [1.0, "rgba(0,0,0,0)"]]


@dataclass
class HoverCells:
    """The hover cells of one variant's window, sorted by (lane, start); times in ns."""

    lane: np.ndarray
    start: np.ndarray
    end: np.ndarray  # where the cell's hover ends: at least one pixel wide, never past the lane's next cell
    last_end: np.ndarray  # where the cell's last activity ends (its extent is start to last_end)
    count: np.ndarray  # activities the cell holds (1: the cell is that activity)
    busy: np.ndarray  # time those activities cover inside the cell
    longest: np.ndarray  # row (into the TimelineData arrays) of the cell's longest activity
    merge_px_ns: float  # activities narrower than this were merged with their sub-pixel neighbours

    def __len__(self) -> int:
        return int(self.start.size)


def hover_cells(v: LaneSegments, width_px: int, max_cells: int = MAX_CELLS) -> HoverCells:
    """The cells of every lane but the host-sync lanes, for the window v was drawn at over width_px pixels."""
    d = v.data
    lo, hi = int(v.lo_ns), int(v.hi_ns)
    pixel = max(1.0, (hi - lo) / max(1, width_px))
    rows = np.flatnonzero((d.ends > lo) & (d.starts < hi) & (d.groups % N_CODES < CODE["host_sync"]))
    lanes = d.groups[rows] // N_CODES
    s = np.maximum(d.starts[rows], lo)
    e = np.minimum(d.ends[rows], hi)
    # by lane, then start: one stable sort of one key, quick on rows that are already sorted per lane and colour
    order = np.argsort(lanes * np.int64(hi - lo + 1) + (s - lo), kind="stable")
    rows, lanes, s, e = rows[order], lanes[order], s[order], e[order]
    if rows.size:  # a cell starts where its lane's earlier cells end (the running end, per lane)
        first_of_lane = np.r_[True, lanes[1:] != lanes[:-1]]
        dense = np.cumsum(first_of_lane) - 1
        stride = np.int64(hi - lo + 1)
        run_end = np.maximum.accumulate(e - lo + dense * stride) - dense * stride + lo
        s = np.where(first_of_lane, s, np.maximum(s, np.r_[lo, run_end[:-1]]))
        keep = e > s  # an activity wholly under an earlier one of its lane (or of no length) adds no cell
        rows, lanes, s, e = rows[keep], lanes[keep], s[keep], e[keep]
    n = rows.size
    new_lane = np.r_[True, lanes[1:] != lanes[:-1]] if n else np.zeros(0, dtype=bool)
    gap = np.r_[0, s[1:] - e[:-1]] if n else np.zeros(0, dtype=np.int64)
    merge_px = pixel
    while True:  # runs of neighbouring sub-pixel activities become one cell; coarser until the cells fit
        narrow = (e - s) < merge_px
        joins = narrow & np.r_[False, narrow[:-1]] & ~new_lane & (gap < merge_px)
        begins = ~joins
        if int(begins.sum()) <= max_cells or merge_px > hi - lo:
            break
        merge_px *= 2
    first = np.flatnonzero(begins)
    last = np.r_[first[1:] - 1, n - 1].astype(np.int64) if n else first
    width = e - s
    counts = np.diff(np.r_[first, n]).astype(np.int64)
    if n:  # each cell's longest activity: the first row of the cell as long as the cell's maximum
        at_max = np.flatnonzero(width == np.repeat(np.maximum.reduceat(width, first), counts))
        cell_at = (np.cumsum(begins) - 1)[at_max]
        longest = rows[at_max[np.r_[True, cell_at[1:] != cell_at[:-1]]]]
    else:
        longest = rows
    start, end, lane = s[first], e[last], lanes[first]
    next_start = np.r_[start[1:], hi].astype(np.float64)
    next_start[np.r_[lane[1:] != lane[:-1], True]] = hi
    # at least HOVER_MIN_PX pixels wide (a mouse lands on whole pixels of a plot that may be narrower than width_px),
    # never into the lane's next cell
    drawn_end = np.minimum(np.maximum(end, start + HOVER_MIN_PX * pixel), np.maximum(next_start, end))
    return HoverCells(lane=lane, start=start, end=drawn_end, last_end=end, count=counts,
                      busy=np.add.reduceat(width, first) if n else width, longest=longest, merge_px_ns=merge_px)


def _ms(x: float, like: float | None = None) -> str:
    """Milliseconds, the timeline's one time unit, with the digits an activity as long as `like` (default x)
    needs: 4, or 6 under a microsecond."""
    size = abs(x if like is None else like)
    return f"{x:.4f} ms" if size >= 1e-3 or size == 0 else f"{x:.6f} ms"


def cell_texts(v: LaneSegments, cells: HoverCells) -> list[str]:
    """Each cell's tooltip: the activity (name, kind, length, start), or how many a merged cell holds. Few tags:
    the JSON Streamlit sends writes each < and > as six characters."""
    d = v.data
    top = cells.longest
    codes = d.groups[top] % N_CODES
    name_i = d.name_idx[top]
    names = np.asarray(d.name_list + [""], dtype=object)[np.where(name_i >= 0, name_i, len(d.name_list))]
    length = (d.ends[top] - d.starts[top]) / 1e6
    at = (d.starts[top] - v.origin_ns) / 1e6
    extent = (cells.last_end - cells.start) / 1e6
    out = []
    for name, code, ms, t0, k, busy, ext in zip(names, codes, length, at, cells.count, cells.busy, extent,
                                                strict=True):
        what = WORDS.get(CODES[int(code)], CODES[int(code)])
        name = plotly_text(str(name)[:NAME_CHARS])
        if k == 1:
            out.append(f"{name}<br>{what} · {_ms(ms)} long, at {_ms(t0, ms)}" if name else
                       f"{what} · {_ms(ms)} long, at {_ms(t0, ms)}")
        else:
            out.append(f"{int(k)} activities under a pixel (box-select splits them)<br>busy "
                       f"{min(100.0, 100 * busy / 1e6 / max(ext, 1e-12)):.0f}% of {_ms(ext)}; longest: "
                       + (f"{name} ({what}, {_ms(ms)})" if name else f"{what}, {_ms(ms)}"))
    return out


def hover_traces(v: LaneSegments, width_px: int, top: int) -> list[go.Heatmap]:
    """The invisible hover rows of one variant (y = top - lane, as timeline_figure draws lanes), one per lane."""
    cells = hover_cells(v, width_px)
    if not len(cells):
        return []
    texts = np.asarray(cell_texts(v, cells), dtype=object)
    out = []
    cuts = np.r_[0, np.flatnonzero(np.diff(cells.lane)) + 1, len(cells)]
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        cs, ce = cells.start[a:b].astype(np.float64), cells.end[a:b]
        gap_before = np.r_[False, cs[1:] > ce[:-1]]
        # the row's edges: its first start, then per cell the start that ends the gap before it (if any) and its
        # end; a cell between two edges is an activity (hover) or a gap (no hover)
        pairs = np.stack([cs, ce], axis=1).ravel()
        is_end = np.tile([False, True], b - a)
        kept = np.stack([gap_before, np.ones(b - a, dtype=bool)], axis=1).ravel()
        edges = np.r_[cs[0], pairs[kept]]
        ends = is_end[kept]
        z = np.where(ends, 1.0, np.nan)[None, :]
        text = np.full((1, ends.size), "", dtype=object)  # numpy arrays: plotly checks them without a copy
        text[0, ends] = texts[a:b]
        y = top - int(cells.lane[a])
        out.append(go.Heatmap(
            x=(edges - v.origin_ns) / 1e6, y=[y - 0.5, y + 0.5], z=z, text=text,
            hovertemplate="%{text}<extra></extra>", hoverongaps=False, colorscale=_TRANSPARENT, showscale=False,
            zmin=0, zmax=1, name="hover", showlegend=False, hoverlabel=dict(namelength=0)))
    return out
