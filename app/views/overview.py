"""Overview: how much communication each rank hides, and the findings that explain the rest.

The key metrics and the first chart come from the per-rank metrics, which the load computes: they reach the
browser while the cross-rank stage and the findings run; for the runs the server loads as it starts, before
the sidebar (app/sidebar.py). While the runs load, the first chart's place holds an empty figure, so the
browser fetches and starts Plotly during the wait rather than after it. A finding's evidence tables are sent
when its expander is open (the first one starts open), not for every finding on every run of the page.
"""

from __future__ import annotations

from dataclasses import replace

import plotly.graph_objects as go
import streamlit as st

from app import decision, ranks, sidebar, ui
from app.tables import readable, show, show_evidence
from viz import labels
from viz.critical import fidelity_line, saving_text
from viz.critical_figures import attribution_figure
from viz.figures import iteration_figure, overview_bars
from viz.safe_text import markdown_text as md  # names from trace files: text, never Markdown
from viz.scale_figures import MANY_RANKS, rank_distributions


def _waiting() -> go.Figure:
    """The empty figure the first chart's place holds while the runs load."""
    fig = go.Figure()
    fig.update_layout(template="plotly_white", height=160, xaxis=dict(visible=False), yaxis=dict(visible=False),
                      annotations=[dict(text="loading and analyzing the runs…", showarrow=False)])
    return fig


st.title("Overview")
decision_box = st.empty()  # the decision, once the whole analysis is there: the first chart comes before it
decision_box.caption("Ranking the runs by their best timing and pricing their fixes…")
head, first_chart = st.container(), st.empty()
first_chart.plotly_chart(_waiting(), theme=None, key="overview_waiting")
sidebar.draw_unless_loaded(ui.selected())
runs = ui.load_selected()
if not runs:
    first_chart.empty()
    sidebar.draw()
    st.stop()

quick = [(r.label, r.rank_report()) for r in runs]  # per-rank metrics only: no wait for the cross-rank stage

# Key metrics, one row per run: the worst rank decides (a step waits for the slowest rank).
for label, rep in quick:
    ratios = [m.overlap_ratio for m in rep.ranks if m.overlap_ratio is not None]
    hidden = [m.whole.hidden_fraction_of_min for m in rep.ranks if m.whole.hidden_fraction_of_min is not None]
    head.markdown(f"**{md(label)}** · {len(rep.ranks)} rank(s) · {md(rep.fmt)}"
                + (f" · world size {rep.world_size}" if rep.world_size else ""))
    c = head.columns(5)
    c[0].metric("Overlap ratio (worst rank)", ui.pct(min(ratios) if ratios else None),
                help=labels.metric("overlap_ratio").help)
    c[1].metric("Exposed comm (max)", ui.ms(max(m.whole.exposed_comm_ns for m in rep.ranks)),
                help=labels.metric("exposed_comm_ns").help)
    c[2].metric("Hidden / min", ui.pct(min(hidden) if hidden else None),
                help=labels.metric("hidden_fraction_of_min").help)
    c[3].metric("GPU span (max)", ui.ms(max(m.whole.span_ns for m in rep.ranks)), help=labels.metric("span_ns").help)
    med = [m.iteration_summary.get("iteration_ns_median") for m in rep.ranks if m.iteration_summary.get("n")]
    c[4].metric("Iteration (median)", ui.ms(max(med)) if med else labels.ABSENT,
                help="median iteration time of the slowest rank")

with first_chart.container():
    if max(len(rep.ranks) for _, rep in quick) > MANY_RANKS:
        st.subheader("Across ranks")
        st.plotly_chart(rank_distributions(quick), theme=None, key="overview_dist")
        st.caption("Many ranks: their distribution, not a bar each. The table below lists every rank (sortable); "
                   "the Stragglers page shows who arrives late, the Timeline draws the ranks you pick.")
    else:
        st.subheader("Where each rank's time goes")
        st.plotly_chart(overview_bars(quick), theme=None, key="overview_bars")
sidebar.draw()  # unless drawn before the load

reports = [(r.label, r.report()) for r in runs]  # the whole analysis: cross-rank stage, findings, critical path
with decision_box.container():
    decision.draw(runs)

rows = []
for label, rep in reports:
    for m in rep.ranks:
        rows.append({"run": label, "rank": m.rank, **m.whole.to_dict(), "n": m.iteration_summary.get("n", 0),
                     "overlap_ratio_worst": m.iteration_summary.get("overlap_ratio_worst")})
show(readable(rows, ["run", "rank", "overlap_ratio", "comm_ns", "compute_ns", "overlap_ns", "exposed_comm_ns",
                     "idle_ns", "span_ns", "n", "overlap_ratio_worst"], headers={"n": "steps"}))

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
    st.markdown(f"**{md(run.label)}**: {len(findings)} finding(s)")
    if not findings:
        st.caption("Nothing found that breaks overlap.")
    for i, f in enumerate(findings):
        icon = {"critical": ":material/error:", "warning": ":material/warning:"}.get(str(f.severity),
                                                                                  ":material/info:")
        box = st.expander(md(f.title), expanded=i == 0, icon=icon, key=f"finding-open-{run.source.key}-{i}",
                          on_change="rerun")
        with box:
            st.markdown(f"{md(f.id)} · {md(f.severity)} · rank(s) {md(', '.join(map(str, f.ranks)))}")
            st.markdown(md(f.explanation))
            st.markdown(f"**Known fix:** {md(f.fix)}")
            if f.saving_ns is not None:
                st.markdown(f"**{md(saving_text(f.saving_ns, f.saving_fraction))}** (replay of {md(f.saving_fix)})")
            if f.evidence and box.open:
                show_evidence(f.evidence, key=f"ev-{run.source.key}-{i}")
            ui.timeline_button("Show in timeline", run.source.key, f.start_ns, f.end_ns,
                               key=f"finding-{run.source.key}-{i}")

priced = [(label, rep, run) for (label, rep), run in zip(reports, runs, strict=True) if rep.critical_path]
if priced:
    st.subheader("What sets the step: critical path per rank")
    for i, (label, rep, run) in enumerate(priced):
        cp = rep.critical_path
        st.markdown(f"**{md(label)}** · {md(fidelity_line(cp))}")
        if len(rep.ranks) > MANY_RANKS:  # many ranks: the ones the Timeline draws, not a bar each
            keep = {str(r) for r in ranks.chosen_ranks(run)} & set(cp.get("per_rank", {}))
            cp = {**cp, "per_rank": {r: d for r, d in cp["per_rank"].items() if r in keep}}
            st.caption(f"ranks {', '.join(sorted(keep, key=int)) or 'none'} of {len(rep.ranks)}: the Timeline's "
                       "ranks among those the replay covers (pick others on the Stragglers page)")
        st.plotly_chart(attribution_figure(cp), theme=None, key=f"critical_{i}")

notes = sorted({n for _, rep in reports for m in rep.ranks for n in m.notes} | {n for _, rep in reports
                                                                                 for n in rep.notes})
if notes:
    with st.expander("Notes from the analysis"):
        for n in notes:
            st.caption(md(n))
