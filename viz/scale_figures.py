"""Figures for runs of many ranks: the distribution of per-rank figures (the Overview past MANY_RANKS
ranks, instead of a bar per rank) and the straggler view's rank x collective lateness, binned so 1024
ranks stay one light heatmap."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

TEMPLATE = "plotly_white"
MANY_RANKS = 16  # past this many ranks, the Overview shows distributions, not one bar per rank
MAX_COLUMNS = 200  # collectives are binned into at most this many columns (each its bin's worst lateness)


def lateness_heatmap(matrix: np.ndarray, first_ids: np.ndarray, ranks: Sequence[int], n_collectives: int
                     ) -> go.Figure:
    """matrix: ranks x columns of lateness (ns), from analyzers.crossrank.stragglers.lateness_matrix.

    z goes out as float32 milliseconds (a typed array: 1024 ranks x 200 columns is ~0.8 MB); one
    Heatmap trace, whatever the rank count, so zoom and hover stay responsive."""
    fig = go.Figure()
    if matrix.size == 0:
        fig.update_layout(template=TEMPLATE, height=200, annotations=[dict(text="no collective with known peers",
                                                                            showarrow=False)])
        return fig
    z = (matrix / 1e6).astype(np.float32)  # ms, as every time the app shows
    per_col = max(1, int(np.ceil(n_collectives / max(1, matrix.shape[1]))))
    fig.add_trace(go.Heatmap(
        z=z, x=np.arange(matrix.shape[1]), y=np.arange(len(ranks)), colorscale="Reds", zmin=0,
        colorbar=dict(title="late by (ms)"), customdata=np.broadcast_to(np.asarray(first_ids)[None, :], z.shape),
        text=np.broadcast_to(np.asarray([f"rank {r}" for r in ranks], dtype=object)[:, None], z.shape),
        hovertemplate="%{text}<br>collective #%{customdata}" + (f" (+{per_col - 1} after it)" if per_col > 1 else "")
                      + "<br>late by %{z:.4f} ms<extra></extra>"))
    step = max(1, len(ranks) // 32)
    fig.update_layout(
        template=TEMPLATE, height=int(min(900, 160 + 6 * len(ranks))), margin=dict(l=10, r=10, t=30, b=40),
        xaxis_title=f"collective (in order; {per_col} per column)" if per_col > 1 else "collective (in order)",
        yaxis=dict(title="rank", tickvals=list(range(0, len(ranks), step)),
                   ticktext=[str(ranks[i]) for i in range(0, len(ranks), step)], autorange="reversed"))
    return fig


def rank_distributions(reports: Sequence[tuple[str, object]]) -> go.Figure:
    """Per run, histograms across its ranks of the overlap ratio, the exposed communication and the GPU
    span, one colour per run (reports: (label, analyzers.report.AnalysisReport))."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=["overlap ratio (%)", "exposed comm (ms)", "GPU span (ms)"])
    for label, rep in reports:
        ranks = rep.ranks  # type: ignore[attr-defined]
        cols = [[100 * m.overlap_ratio for m in ranks if m.overlap_ratio is not None],
                [m.whole.exposed_comm_ns / 1e6 for m in ranks], [m.whole.span_ns / 1e6 for m in ranks]]
        for i, x in enumerate(cols, start=1):
            fig.add_trace(go.Histogram(x=np.asarray(x, dtype=np.float32), name=str(label), legendgroup=str(label),
                                       showlegend=i == 1, opacity=0.7, nbinsx=40,
                                       hovertemplate="%{x}: %{y} ranks<extra>" + str(label) + "</extra>"),
                          row=1, col=i)
    fig.update_layout(template=TEMPLATE, barmode="overlay", height=320, margin=dict(l=10, r=10, t=40, b=30),
                      yaxis_title="ranks")
    return fig
