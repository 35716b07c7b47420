"""The dependency graph's answers drawn with Plotly: the attribution bar per rank and the critical
activities outlined on a timeline (the words and rows are in viz/critical.py, which needs no Plotly).
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from .critical import PART_LABELS

PART_COLORS = {
    "compute": "#1f77b4", "comm_transfer": "#d62728", "peer_wait": "#ff7f0e", "launch_gaps": "#bcbd22",
    "sync_idle": "#e377c2", "copies": "#9467bd", "other": "#b0b0b0",
}


def attribution_figure(cp: dict[str, Any]) -> go.Figure:
    """One horizontal bar per rank: its mean step split into the critical path's parts."""
    per = cp.get("per_rank", {})
    ranks = sorted(per, key=int)
    fig = go.Figure()
    for k, label in PART_LABELS.items():
        fig.add_bar(y=[f"rank {r}" for r in ranks], x=[per[r]["parts"][k] / 1e6 for r in ranks], name=label,
                    orientation="h", marker_color=PART_COLORS[k],
                    hovertemplate=f"{label}: %{{x:.3f}} ms<extra></extra>")
    fig.update_layout(barmode="stack", xaxis_title="critical path of the mean step (ms)", height=120 + 40 * len(ranks),
                      margin=dict(l=10, r=10, t=30, b=10), legend=dict(orientation="h"),
                      title="what sets each rank's step (critical path)")
    return fig


MAX_OVERLAY = 5_000  # critical activities drawn per variant (the longest when there are more)


def critical_overlay(fig: go.Figure, variants: list, trace_sets: list, cps: list[dict[str, Any] | None]) -> int:
    """Outline the critical activities on a timeline_figure (viz.figures): a thin dark line along the top edge
    of each activity's stream lane (above its bar, so the bar's colour stays visible), per variant row; returns
    how many were drawn. trace_sets: the sets
    the timeline was drawn from (same row order as the graph's, aligned clock)."""
    import numpy as np

    drawn = 0
    for row, (v, ts, cp) in enumerate(zip(variants, trace_sets, cps, strict=True), start=1):
        if not cp:
            continue
        lanes = v.data.lanes
        top = len(lanes) - 1
        streams = lanes[lanes["kind"] == "stream"]
        lane_of = {(int(r), int(d), int(s)): int(ln) for r, d, s, ln in
                   zip(streams["rank"], streams["device"], streams["stream"], streams["lane"], strict=True)}
        xs, ys = [], []
        for r_key, rows in cp.get("critical_rows", {}).items():
            t = ts.ranks.get(int(r_key))
            if t is None or not len(rows):
                continue
            idx = np.asarray(rows, dtype=np.int64)
            idx = idx[idx < len(t.gpu)]
            g = t.gpu
            s, e = g["start_ns"].to_numpy(np.int64)[idx], g["end_ns"].to_numpy(np.int64)[idx]
            keep = (e > v.lo_ns) & (s < v.hi_ns)
            idx, s, e = idx[keep], s[keep], e[keep]
            if len(idx) > MAX_OVERLAY:
                longest = np.argsort(s - e, kind="stable")[:MAX_OVERLAY]
                idx, s, e = idx[longest], s[longest], e[longest]
            lane = [lane_of.get((int(r_key), int(d), int(st)), -1) for d, st in
                    zip(g["device"].to_numpy()[idx], g["stream"].to_numpy()[idx], strict=True)]
            for a, b, ln in zip(s, e, lane, strict=True):
                if ln >= 0:
                    xs += [(a - v.origin_ns) / 1e6, (b - v.origin_ns) / 1e6, None]
                    ys += [top - ln + 0.45, top - ln + 0.45, None]  # above the lane's bar, not over it
        if xs:
            drawn += len(xs) // 3
            fig.add_trace(go.Scattergl(x=xs, y=ys, mode="lines", line=dict(color="#111111", width=2),
                                       name="critical path", legendgroup="critical", showlegend=row == 1,
                                       hoverinfo="skip"), row=row, col=1)
    return drawn
