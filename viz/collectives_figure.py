"""The Collectives page's figure: bus bandwidth against message size, alone vs overlapped with compute.

A plain function from the collectives table (analyzers.crossrank.collective_table) to a go.Figure, no
streamlit, so it works in a notebook too. Each point is one communication activity; its customdata
holds its position in the table, which the page uses to jump to it on the Timeline.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .figures import COLORS, TEMPLATE
from .safe_text import plotly_text

STATES = (("alone", False, COLORS["exposed_comm"]), ("overlapped with compute", True, COLORS["overlap"]))


def plottable(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows a point can show: a message size and a bus bandwidth."""
    return rows[(rows["bytes"] > 0) & np.isfinite(rows["busbw_gbps"].to_numpy(dtype=float))]


def busbw_figure(rows: pd.DataFrame, link_gbps: float | None = None) -> go.Figure:
    """Bus bandwidth (GB/s) against message size (bytes, log scale), one trace per overlap state;
    customdata: the row's index in rows. The link's peak is a dashed line when known."""
    fig = go.Figure()
    pts = plottable(rows)
    for name, flag, colour in STATES:
        part = pts[pts["overlapped"] == flag]
        if part.empty:
            continue
        text = [plotly_text(f"rank {r} · {op} · {lib}") + "<br>" + plotly_text(n) for r, op, lib, n in
                zip(part["rank"], part["op"], part["library"], part["name"].astype(str).str.slice(0, 60), strict=True)]
        fig.add_trace(go.Scatter(
            x=part["bytes"].to_numpy(dtype=float), y=part["busbw_gbps"].to_numpy(dtype=float), mode="markers",
            name=name, marker=dict(color=colour, size=8, opacity=0.75), text=text,
            customdata=np.stack([part.index.to_numpy(), part["transfer_ns"].to_numpy(dtype=float) / 1e6,
                                 part["overlap_share"].to_numpy(dtype=float)], axis=1),
            hovertemplate="%{text}<br>%{x:,.0f} B · busbw %{y:,.1f} GB/s<br>transfer %{customdata[1]:,.4f} ms · "
                          "compute beside %{customdata[2]:.0%}<extra></extra>"))
    if link_gbps:
        fig.add_hline(y=link_gbps, line_dash="dash", line_color="#555",
                      annotation_text=f"link peak {link_gbps:,.0f} GB/s", annotation_position="top left")
    fig.update_layout(template=TEMPLATE, height=460, xaxis=dict(type="log", title="message size", **bytes_ticks(pts)),
                      yaxis=dict(title="bus bandwidth (GB/s)", rangemode="tozero"),
                      margin=dict(l=10, r=10, t=30, b=40), legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))
    return fig


BYTE_UNITS = ("B", "kB", "MB", "GB", "TB")


def bytes_ticks(pts: pd.DataFrame) -> dict:
    """Tick values at the powers of 10 the sizes span, written with their unit (1 kB, 10 MB, 1 GB): plotly's own
    SI ticks write 10^9 as "1B", which reads as one byte."""
    sizes = pts["bytes"].to_numpy(dtype=float) if len(pts) else np.array([1.0])
    lo, hi = int(np.floor(np.log10(max(sizes.min(), 1.0)))), int(np.ceil(np.log10(max(sizes.max(), 1.0))))
    vals = [10.0 ** e for e in range(lo, max(hi, lo + 1) + 1)]
    text = [f"{10 ** (e % 3):g} {BYTE_UNITS[min(e // 3, len(BYTE_UNITS) - 1)]}" for e in range(lo, max(hi, lo + 1) + 1)]
    return {"tickvals": vals, "ticktext": text}

