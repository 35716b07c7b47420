"""Syncs: every blocking host sync, what it cost the GPU, and who called it."""

from __future__ import annotations

import streamlit as st

from app import ui
from viz.figures import sync_figure

st.title("Syncs")
runs = ui.load_selected()
if not runs:
    st.stop()
try:
    import analyzers.syncs.blocking  # noqa: F401
except ImportError:
    ui.not_available("Host-sync analysis", "analyzers.syncs.blocking")
    st.stop()

for run in runs:
    st.subheader(run.label)
    data = run.timeline()
    sy = data.syncs
    if sy.empty:
        st.caption("No blocking host syncs: the host never waited for the GPU.")
        continue
    c = st.columns(3)
    c[0].metric("Blocking syncs", f"{len(sy):,}")
    c[1].metric("Host blocked", ui.ms(float(sy["blocked_ns"].sum())))
    c[2].metric("GPU idle caused", ui.ms(float(sy["gpu_idle_ns"].fillna(0).sum())))
    st.plotly_chart(sync_figure(sy, t0_ns=data.t_min), theme=None, key=f"syncs-fig-{run.source.key}")
    table = sy.assign(start_ms=(sy["start_ns"] - data.t_min) / 1e6, blocked_ms=sy["blocked_ns"] / 1e6,
                      gpu_idle_ms=sy["gpu_idle_ns"] / 1e6)
    table = table.sort_values("gpu_idle_ms", ascending=False, na_position="last")
    shown = [c for c in ("rank", "name", "kind", "caller", "sync_op", "annotation", "step", "start_ms", "blocked_ms",
                         "gpu_idle_ms") if c in table.columns]
    st.dataframe(table[shown], hide_index=True,
                 key=f"syncs-table-{run.source.key}", on_select="rerun", selection_mode="single-row")
    picked = st.session_state.get(f"syncs-table-{run.source.key}")
    rows = picked["selection"]["rows"] if picked else []
    if rows:
        r = table.iloc[rows[0]]
        ui.timeline_button(f"Show this {r['name']} (rank {r['rank']}) in the timeline", run.source.key,
                           int(r["start_ns"]), int(r["end_ns"]), key=f"sync-go-{run.source.key}", pad=2.0)
    else:
        st.caption("Select a row to jump to that sync in the timeline.")
