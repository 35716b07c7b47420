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
