"""Overview: how much communication each rank hides, and the findings that explain the rest."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import streamlit as st

from app import ranks, ui
from viz.figures import iteration_figure, overview_bars
from viz.scale_figures import MANY_RANKS, rank_distributions

st.title("Overview")
runs = ui.load_selected()
if not runs:
    st.stop()

reports = [(r.label, r.report()) for r in runs]

# Key metrics, one row per run: the worst rank decides (a step waits for the slowest rank).
for label, rep in reports:
    ratios = [m.overlap_ratio for m in rep.ranks if m.overlap_ratio is not None]
    hidden = [m.whole.hidden_fraction_of_min for m in rep.ranks if m.whole.hidden_fraction_of_min is not None]
    st.markdown(f"**{label}** · {len(rep.ranks)} rank(s) · {rep.fmt}"
                + (f" · world size {rep.world_size}" if rep.world_size else ""))
    c = st.columns(5)
    c[0].metric("Overlap ratio (worst rank)", ui.pct(min(ratios)) if ratios else "–",
                help="overlap / comm: the share of communication time hidden behind compute")
    c[1].metric("Exposed comm (max)", ui.ms(max(m.whole.exposed_comm_ns for m in rep.ranks)),
                help="comm − overlap: communication time nothing hid")
    c[2].metric("Hidden / min", ui.pct(min(hidden)) if hidden else "–",
                help="overlap / min(comm, compute): 100 % = the shorter side is fully hidden")
    c[3].metric("GPU span (max)", ui.ms(max(m.whole.span_ns for m in rep.ranks)))
    med = [m.iteration_summary.get("iteration_ns_median") for m in rep.ranks if m.iteration_summary.get("n")]
    c[4].metric("Iteration (median)", ui.ms(max(med)) if med else "–",
                help="median iteration time of the slowest rank")

if max(len(rep.ranks) for _, rep in reports) > MANY_RANKS:
    st.subheader("Across ranks")
    st.plotly_chart(rank_distributions(reports), theme=None, key="overview_dist")
    st.caption("Many ranks: their distribution, not a bar each. The table below lists every rank (sortable); "
               "the Stragglers page shows who arrives late, the Timeline draws the ranks you pick.")
else:
    st.subheader("Where each rank's time goes")
    st.plotly_chart(overview_bars(reports), theme=None, key="overview_bars")

rows = []
for label, rep in reports:
    for m in rep.ranks:
        w = m.whole
        rows.append({"run": label, "rank": m.rank, "overlap ratio": w.overlap_ratio,
                     "comm (ms)": w.comm_ns / 1e6, "compute (ms)": w.compute_ns / 1e6,
                     "overlap (ms)": w.overlap_ns / 1e6, "exposed comm (ms)": w.exposed_comm_ns / 1e6,
                     "idle (ms)": w.idle_ns / 1e6, "span (ms)": w.span_ns / 1e6,
                     "steps": m.iteration_summary.get("n", 0),
                     "worst step overlap": m.iteration_summary.get("overlap_ratio_worst")})
st.dataframe(pd.DataFrame(rows), hide_index=True, column_config={
    "overlap ratio": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="percent"),
    "worst step overlap": st.column_config.NumberColumn(format="percent"),
})

if any(not m.iterations.empty for _, rep in reports for m in rep.ranks):
    st.subheader("Overlap per iteration")
    # many ranks: the ranks the Timeline draws (default: slowest, median and fastest), not a line each
    few = [(label, replace(rep, ranks=[m for m in rep.ranks if m.rank in set(ranks.chosen_ranks(run))]))
           for (label, rep), run in zip(reports, runs, strict=True)]
    st.plotly_chart(iteration_figure(few), theme=None, key="iteration_fig")

st.subheader("Findings")
for run in runs:
    findings = run.findings()
    if findings is None:
        ui.not_available("Diagnosis of lost overlap (findings)", "analyzers.findings")
        break
    st.markdown(f"**{run.label}**: {len(findings)} finding(s)")
    if not findings:
        st.caption("Nothing found that breaks overlap.")
    for i, f in enumerate(findings):
        icon = {"critical": ":material/error:", "warning": ":material/warning:"}.get(str(f.severity),
                                                                                  ":material/info:")
        with st.expander(f.title, expanded=i == 0, icon=icon):
            st.markdown(f"`{f.id}` · {f.severity} · rank(s) {', '.join(map(str, f.ranks))}")
            st.write(f.explanation)
            st.markdown(f"**Known fix:** {f.fix}")
            if f.evidence:
                ui.show_evidence(f.evidence, key=f"ev-{run.source.key}-{i}")
            ui.timeline_button("Show in timeline", run.source.key, f.start_ns, f.end_ns,
                               key=f"finding-{run.source.key}-{i}")

notes = sorted({n for _, rep in reports for m in rep.ranks for n in m.notes} | {n for _, rep in reports
                                                                                 for n in rep.notes})
if notes:
    with st.expander("Notes from the analysis"):
        for n in notes:
            st.caption(n)
