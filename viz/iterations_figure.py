"""The Overview's overlap per iteration: one line per (run, rank), every line visible even where they coincide."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from analyzers.report import AnalysisReport

from . import labels
from .safe_text import plotly_text

TEMPLATE = "plotly_white"
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "cross", "star", "triangle-down")


def _ms(ns: np.ndarray) -> np.ndarray:
    return np.asarray(ns, dtype=np.float64) / 1e6


def iteration_figure(reports: Sequence[tuple[str, AnalysisReport]]) -> go.Figure:
    """Overlap ratio per iteration, one line per (variant, rank): a bad step stands out. Lines that coincide
    (six runs at 0 %) stay apart: each is shifted a little along x within its step and has its own dash and
    marker, so none hides another."""
    fig = go.Figure()
    series = [(label, m) for label, rep in reports for m in rep.ranks if not m.iterations.empty]
    width = min(0.6, 0.08 * max(0, len(series) - 1))
    for i, (label, m) in enumerate(series):
        it = m.iterations
        name = plotly_text(f"{label} · rank {m.rank}" if len(reports) > 1 else f"rank {m.rank}")
        shift = (i / max(1, len(series) - 1) - 0.5) * width if len(series) > 1 else 0.0
        fig.add_trace(go.Scatter(
            x=it["step"].to_numpy() + shift, y=it["overlap_ratio"].astype(float).to_numpy() * 100,
            mode="lines+markers", name=name, line=dict(dash=DASHES[i % len(DASHES)]),
            marker=dict(symbol=SYMBOLS[i % len(SYMBOLS)], size=8),
            customdata=np.stack([_ms(it["exposed_comm_ns"].to_numpy()), it["step"].to_numpy()], axis=1),
            hovertemplate=name + "<br>step %{customdata[1]:.0f}: overlap %{y:.1f} %<br>exposed comm "
                                 "%{customdata[0]:.3f} ms<extra></extra>",
        ))
    steps = sorted({int(s) for _, rep in reports for m in rep.ranks for s in m.iterations.get("step", [])})
    ticks = dict(tickmode="array", tickvals=steps) if len(steps) <= 30 else dict(tickformat="d")
    fig.update_layout(template=TEMPLATE, height=300, xaxis=dict(title="step", **ticks),
                      yaxis_title=f"{labels.label('overlap_ratio')}, %",
                      yaxis=dict(range=[0, 105]), margin=dict(l=10, r=10, t=30, b=40))
    return fig
