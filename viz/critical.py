"""What every front end shows of the dependency graph's answers: a finding's price in words, the
critical-path rows (per step, per rank) and the attribution bar per rank.

Reads the ``critical_path`` section of a report (analyzers.graph.analysis.critical_path_section)
and the findings' ``saving_ns``; the CLI, the app and the HTML report render these the same way.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from .formats import ms, pct

PART_LABELS = {
    "compute": "compute", "comm_transfer": "exposed transfer", "peer_wait": "peer wait",
    "launch_gaps": "launch gaps", "sync_idle": "blocking-sync idle", "copies": "copies / memsets", "other": "other",
}
PART_COLORS = {
    "compute": "#1f77b4", "comm_transfer": "#d62728", "peer_wait": "#ff7f0e", "launch_gaps": "#bcbd22",
    "sync_idle": "#e377c2", "copies": "#9467bd", "other": "#b0b0b0",
}
STEP_HEADER = ["step", "slowest rank", "replayed ms", *PART_LABELS.values(), "late rank (cause)"]
FIDELITY_HEADER = ["step", "measured ms", "replayed ms", "error"]


def saving_text(saving_ns: int | None, fraction: float | None) -> str:
    """'fixing this saves ≈ 1.800 ms per step (34.0%)', or '' when the finding is not priced."""
    if saving_ns is None:
        return ""
    if saving_ns <= 0:
        return "fixing this alone saves nothing per step (replay)"
    return f"fixing this saves ≈ {ms(saving_ns)} ms per step ({pct(fraction)})"


def _late(step: dict[str, Any]) -> str:
    return "; ".join(f"rank {p['late_rank']} {ms(p['ns'])} ms ({p['cause']})" for p in step.get("peer_wait", [])[:3])


def step_rows(cp: dict[str, Any]) -> list[list[str]]:
    """One row per step: the slowest rank's critical path, its parts in ms."""
    return [[str(s["step"]), str(s["rank"]), ms(s["replayed_ns"]), *(ms(s["parts"][k]) for k in PART_LABELS),
             _late(s)] for s in cp.get("steps", [])]


def fidelity_rows(cp: dict[str, Any]) -> list[list[str]]:
    return [[str(s["step"]), ms(s["measured_ns"]), ms(s["replayed_ns"]),
             pct(s["error"]) if s["error"] is not None else "n/a"] for s in cp["fidelity"]["steps"]]


def fidelity_line(cp: dict[str, Any]) -> str:
    f = cp["fidelity"]
    err = pct(f["median_abs_error"]) if f["median_abs_error"] is not None else "n/a"
    return (f"replay of the unmodified graph: step {ms(f['replayed_step_ns'])} ms against {ms(f['measured_step_ns'])}"
            f" ms measured (median error {err}, target {pct(f['target'])})")


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
            if t is None or not rows:
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
