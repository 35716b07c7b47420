"""Syncs: every blocking host sync, what it cost the GPU, and who called it.

A run of many ranks shows the syncs of the Timeline's ranks (app/ranks.py: by default the slowest, the
median and the fastest), not a lane per rank; the caption counts those of every rank.
"""

from __future__ import annotations

import numpy as np
import streamlit as st

from app import ranks, ui
from app.tables import readable, show
from viz.figures import sync_figure
from viz.safe_text import markdown_text as md  # names from trace files: text, never Markdown

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
    st.subheader(md(run.label))
    n_ranks = len(run.report().ranks)
    few = ranks.drawn_ranks(run)
    data = run.timeline(few)  # the Timeline's own cache entry: these ranks only
    sy = data.syncs
    if few is not None:
        n_all = sum(len(df) for df in (run.report().syncs or {}).values())
        st.caption(f"Ranks {', '.join(map(str, few))} of {n_ranks} (the Timeline's ranks; pick others there or on "
                   f"the Stragglers page): {len(sy):,} of the {n_all:,} blocking syncs of all ranks.")
    if sy.empty:
        st.caption("No blocking host syncs: the host never waited for the GPU." if few is None else
                   "None on these ranks.")
        continue
    harmful = sy["gpu_idle_ns"].fillna(0) > 0
    c = st.columns(4)
    c[0].metric("Syncs that idled the GPU", f"{int(harmful.sum()):,}",
                help="blocking host syncs after which the GPU had nothing queued for a while")
    c[1].metric("Host blocked in them", ui.ms(float(sy.loc[harmful, "blocked_ns"].sum())),
                help="host time blocked in the syncs that idled the GPU")
    c[2].metric("GPU idle caused", ui.ms(float(sy["gpu_idle_ns"].fillna(0).sum())))
    c[3].metric("Harmless syncs (no GPU idle)", f"{int((~harmful).sum()):,}",
                help="the GPU never waited for the host after them (a run's closing cudaDeviceSynchronize); host "
                     f"time blocked in them: {ui.ms(float(sy.loc[~harmful, 'blocked_ns'].sum()))}, not counted above")
    st.plotly_chart(sync_figure(sy, t0_ns=data.t_min), theme=None, key=f"syncs-fig-{run.source.key}")
    table = sy.assign(start_ns=sy["start_ns"] - data.t_min).sort_values("gpu_idle_ns", ascending=False,
                                                                          na_position="last")
    table = table.assign(sync_effect=np.where(table["gpu_idle_ns"].fillna(0) > 0, "idled the GPU",
                                              "harmless (no GPU idle)"))
    shown = [c for c in ("rank", "name", "kind", "sync_effect", "caller", "sync_op", "annotation", "step", "start_ns",
                         "blocked_ns", "gpu_idle_ns") if c in table.columns]
    show(readable(table, shown, headers={"start_ns": "start (ms from the trace start)"}),
         key=f"syncs-table-{run.source.key}", on_select="rerun", selection_mode="single-row")
    table = table.assign(start_ns=table["start_ns"] + data.t_min)
    picked = st.session_state.get(f"syncs-table-{run.source.key}")
    rows = picked["selection"]["rows"] if picked else []
    if rows:
        r = table.iloc[rows[0]]
        ui.timeline_button(f"Show this {r['name']} (rank {r['rank']}) in the timeline", run.source.key,
                           int(r["start_ns"]), int(r["end_ns"]), key=f"sync-go-{run.source.key}", pad=2.0)
    else:
        st.caption("Select a row to jump to that sync in the timeline.")
