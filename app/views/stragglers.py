"""Stragglers: which ranks arrive late to collectives, by how much, and what they did before.

From analyzers.crossrank.stragglers (the same figures as `analyze`'s straggler section): per rank the
times it was last, its median and worst lateness, its robust z-score and what its own GPU held before
its late arrivals; the rank x collective heatmap; picked ranks go to the Timeline.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from analyzers.crossrank.stragglers import lateness_matrix
from app import ranks, ui
from app.tables import readable, show
from viz.safe_text import markdown_text as md  # names from trace files: text, never Markdown
from viz.scale_figures import MAX_COLUMNS, lateness_heatmap

st.title("Stragglers")
runs = ui.load_selected()
if not runs:
    st.stop()

for run in runs:
    st.header(md(run.label))
    rep = run.report()
    view = rep.stragglers
    if rep.cross_rank is None or not view or not view.get("ranks"):
        st.info("The straggler view needs two or more ranks with matched collectives.")
        continue
    table = pd.DataFrame(view["ranks"])
    c = st.columns(4)
    c[0].metric("Ranks", f"{len(table):,}")
    c[1].metric("Collectives", f"{view['n_collectives']:,}")
    c[2].metric("Outliers", f"{len(view['outliers'])}", help=f"robust z-score of the median lateness >= "
                f"{view['params']['min_z']} (and at least {view['params']['min_lateness_ns'] / 1e6:.3f} ms)")
    d = view["distribution"]["median_lateness_ns"]
    c[3].metric("Median lateness, p90 rank", ui.ms(d.get("p90")))
    if view["outliers"]:
        st.markdown("**Outliers:** " + ", ".join(f"rank {r}" for r in view["outliers"]))
    if view["hosts"]:
        hosts = [{**h, "ranks": ", ".join(map(str, h["ranks"])), "outliers": ", ".join(map(str, h["outliers"]))}
                 for h in view["hosts"]]
        show(readable(hosts, ["host", "ranks", "n_last", "median_lateness_ns", "worst_lateness_ns", "outliers"]),
             key=f"st-hosts-{run.source.key}")

    st.subheader("Lateness, rank x collective")
    mat, first_ids, rks = lateness_matrix(rep.cross_rank.collectives, rep.cross_rank.members,
                                          [m.rank for m in rep.ranks], MAX_COLUMNS)
    st.plotly_chart(lateness_heatmap(mat, first_ids, rks, view["n_collectives"]), theme=None,
                    key=f"st-heat-{run.source.key}")

    st.subheader("Per rank")
    shown = table.sort_values(["outlier", "n_last", "median_lateness_ns"], ascending=False, kind="stable")
    cols = ["rank", "host", "outlier", "z", "n_last", "n_collectives", "last_share", "median_lateness_ns",
            "worst_lateness_ns", "before_mostly", "before_compute_ns", "before_idle_ns"]
    key = f"st-table-{run.source.key}"
    show(readable(shown, cols), key=key, on_select="rerun", selection_mode="multi-row")
    state = st.session_state.get(key)
    picked = [int(shown["rank"].iloc[i]) for i in (state["selection"]["rows"] if state else []) if i < len(shown)]
    st.caption(f"Before: what the rank's {view['before_source']} held, over the collectives it was last to. "
               "Select rows to send those ranks to the Timeline.")
    if st.button(f"Show {len(picked) or 'the top 3'} rank(s) in the Timeline", key=f"st-go-{run.source.key}"):
        ranks.send_to_timeline(run.source.key, picked or shown["rank"].head(3).astype(int).tolist())
