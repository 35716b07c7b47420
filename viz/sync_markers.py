"""The timeline's host-sync markers: a filled triangle where a blocking sync left the GPU idle, a small open grey
one where it caused no GPU idle (harmless: a run's closing cudaDeviceSynchronize), never both merged into a band.

Markers closer than MIN_GAP_PX on one lane are thinned to the one that cost the most (its hover says how many it
stands for), and a marker is no taller than its lane, so on a whole trace of many syncs they stay apart and off
the kernel lanes. Names (API, caller) go into hover text escaped, as plain text.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .safe_text import plotly_text

MIN_GAP_PX = 14  # markers closer than this on one lane are one marker
HARMFUL_COLOR, HARMLESS_COLOR = "#e377c2", "#9e9e9e"


def thin(frame: pd.DataFrame, lo_ns: int, hi_ns: int, width_px: int, gap_px: int = MIN_GAP_PX) -> pd.DataFrame:
    """One row per (y, gap_px-wide bin of the window): the costliest sync there (GPU idle, then host time),
    with `merged`, how many syncs it stands for."""
    if frame.empty:
        return frame.assign(merged=np.zeros(0, dtype=np.int64))
    bin_ns = max(1.0, (hi_ns - lo_ns) * gap_px / max(1, width_px))
    f = frame.assign(_bin=((frame["start_ns"] - lo_ns) // bin_ns).astype(np.int64))
    f = f.sort_values(["gpu_idle_ns", "blocked_ns"], ascending=False, na_position="last", kind="stable")
    counts = f.groupby(["y", "_bin"]).size().rename("merged")
    first = f.groupby(["y", "_bin"], sort=False).head(1)
    return first.join(counts, on=["y", "_bin"]).drop(columns="_bin").sort_values("start_ns", kind="stable")


def sync_traces(inside: pd.DataFrame, y: np.ndarray, origin_ns: int, lo_ns: int, hi_ns: int, width_px: int,
                lane_px: int, legend_done: set[str]) -> list[go.Scattergl]:
    """The markers of the syncs inside the window (normalize_syncs columns), y: each one's lane position. They share
    the legend entry (and its toggle) of their lane's bars (viz/figures.py: legend groups by colour code)."""
    frame = inside.assign(y=y, gpu_idle_ns=inside["gpu_idle_ns"].astype(float),
                          blocked_ns=inside["blocked_ns"].astype(float))
    harmful = frame["gpu_idle_ns"].fillna(0) > 0
    size = float(max(6, min(11, lane_px * 0.55)))
    out = []
    for key, part, name, marker in (
        ("host_sync", frame[harmful], "blocking host sync (GPU idled)",
         dict(symbol="triangle-down", size=size, color=HARMFUL_COLOR, line=dict(color="#333", width=1))),
        ("harmless_sync", frame[~harmful], "host sync, no GPU idle (harmless)",
         dict(symbol="triangle-down-open", size=size * 0.7, color=HARMLESS_COLOR, line=dict(width=1))),
    ):
        shown = thin(part, lo_ns, hi_ns, width_px)
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
