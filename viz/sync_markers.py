"""The timeline's host-sync markers: a filled triangle where a blocking sync left the GPU idle, a small open grey
one where it caused no GPU idle (harmless: a run's closing cudaDeviceSynchronize), never both merged into a band.

Markers closer than MIN_GAP_PX on one lane (of either kind) are thinned to the one that cost the most (its hover
says how many it stands for), and a marker is no taller than its lane, so on a whole trace of many syncs they stay
apart and off the kernel lanes. Names (API, caller) go into hover text escaped, as plain text.
"""

from __future__ import annotations

import bisect

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .safe_text import plotly_text

# Markers closer than this on one lane are one marker. In the figure's pixels (the Timeline's "Pixels across",
# 1600 by default), while the plot a browser draws is 700-1000 px wide on a laptop: 28 keeps markers (11 px at
# most) a marker apart down to a 630 px plot.
MIN_GAP_PX = 28
HARMFUL_COLOR, HARMLESS_COLOR = "#e377c2", "#9e9e9e"


def thin(frame: pd.DataFrame, lo_ns: int, hi_ns: int, width_px: int, gap_px: int = MIN_GAP_PX) -> pd.DataFrame:
    """The syncs to mark, at least gap_px apart on each lane (y): the costliest first (GPU idle, then host time),
    each of the others counted into the nearest kept one on its lane within gap_px, as `merged` (fixed pixel bins
    would leave two markers on either side of a bin edge touching)."""
    if frame.empty:
        return frame.assign(merged=np.zeros(0, dtype=np.int64))
    gap_ns = max(1.0, (hi_ns - lo_ns) * gap_px / max(1, width_px))
    f = frame.sort_values(["gpu_idle_ns", "blocked_ns"], ascending=False, na_position="last", kind="stable")
    owner = np.arange(len(f))
    kept: dict[float, list[tuple[float, int]]] = {}  # lane -> its kept markers (start, position), by start
    for i, (start, lane) in enumerate(zip(f["start_ns"].to_numpy(dtype=float), f["y"].to_numpy(), strict=True)):
        marks = kept.setdefault(lane, [])
        j = bisect.bisect_left(marks, (start, -1))
        near = min((marks[k] for k in (j - 1, j) if 0 <= k < len(marks)), key=lambda m: abs(m[0] - start),
                   default=None)
        if near is not None and abs(near[0] - start) < gap_ns:
            owner[i] = near[1]
        else:
            bisect.insort(marks, (start, i))
    keep = owner == np.arange(len(f))
    return f.assign(merged=np.bincount(owner, minlength=len(f)))[keep].sort_values("start_ns", kind="stable")


def sync_traces(inside: pd.DataFrame, y: np.ndarray, origin_ns: int, lo_ns: int, hi_ns: int, width_px: int,
                lane_px: int, legend_done: set[str]) -> list[go.Scattergl]:
    """The markers of the syncs inside the window (normalize_syncs columns), y: each one's lane position. They share
    the legend entry (and its toggle) of their lane's bars (viz/figures.py: legend groups by colour code)."""
    frame = inside.assign(y=y, gpu_idle_ns=inside["gpu_idle_ns"].astype(float),
                          blocked_ns=inside["blocked_ns"].astype(float))
    harmful = frame["gpu_idle_ns"].fillna(0) > 0
    size = float(max(6, min(11, lane_px * 0.55)))
    out = []
    # one thinning for both kinds, so a harmless marker never lands on a harmful one: a harmful sync costs more
    # than any harmless one, so it is kept and the harmless ones beside it are counted into it
    shown_all = thin(frame.assign(_harmful=harmful), lo_ns, hi_ns, width_px)
    for key, shown, name, marker in (
        ("host_sync", shown_all[shown_all["_harmful"]], "blocking host sync (GPU idled)",
         dict(symbol="triangle-down", size=size, color=HARMFUL_COLOR, line=dict(color="#333", width=1))),
        ("harmless_sync", shown_all[~shown_all["_harmful"]], "host sync, no GPU idle (harmless)",
         dict(symbol="triangle-down-open", size=size * 0.7, color=HARMLESS_COLOR, line=dict(width=1))),
    ):
        if shown.empty:
            continue
        custom = np.stack([shown["blocked_ns"].to_numpy() / 1e6, shown["gpu_idle_ns"].fillna(0).to_numpy() / 1e6,
                           shown["merged"].to_numpy(dtype=float)], axis=1).astype(np.float32)
        text = [plotly_text(f"{n} {c}".strip()) for n, c in zip(shown["name"], shown["caller"], strict=True)]
        out.append(go.Scattergl(
            x=((shown["start_ns"].to_numpy() - origin_ns) / 1e6).astype(np.float32),
            y=shown["y"].to_numpy(dtype=np.float32), mode="markers", marker=marker, customdata=custom, text=text,
            hovertemplate="<b>%{text}</b><br>host blocked %{customdata[0]:.3f} ms"
                          "<br>GPU idle caused %{customdata[1]:.3f} ms"
                          "<br>%{customdata[2]:.0f} sync(s) at this pixel<extra></extra>",
            name=name, legendgroup=key, showlegend=key not in legend_done))
        legend_done.add(key)
    return out
