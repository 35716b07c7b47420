"""Diff: two runs (schedule variants) side by side: metrics, findings, kernels and both timelines.

Everything is analyzers.diff.diff_reports (one definition of the comparison, shared with
`overlapscope diff`); the timelines are aligned at the iteration the diff aligned on.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import ranks, ui
from app.decision import plain
from app.downloads import diff_downloads
from app.tables import readable, show
from viz import labels
from viz.decision import best_comparison, diff_tone
from viz.diff_tables import metric_rows
from viz.figures import timeline_figure
from viz.lod import DEFAULT_MAX_SEGMENTS, DEFAULT_WIDTH_PX
from viz.safe_text import markdown_text as md  # names from trace files: text, never Markdown
from viz.timeline import lod_for_windows

st.title("Diff")
try:
    import analyzers.diff  # noqa: F401
except ImportError:
    ui.not_available("Trace diff", "analyzers.diff")
    st.stop()

srcs = ui.sources()
keys = list(srcs)
if len(keys) < 2:
    st.info("A diff needs two runs: add another one in the sidebar (server path or upload).")
    st.stop()
chosen = [s.key for s in ui.selected()]
a_default = chosen[0] if chosen else keys[0]
b_default = next((k for k in chosen[1:] + keys if k != a_default), keys[1])
c = st.columns(2)
a_key = c[0].selectbox("A (before)", keys, index=keys.index(a_default), format_func=lambda k: srcs[k].label,
                       key="diff_a")
b_key = c[1].selectbox("B (after)", keys, index=keys.index(b_default), format_func=lambda k: srcs[k].label,
                       key="diff_b")
if a_key == b_key:
    st.warning("Pick two different runs.")
    st.stop()
run_a, run_b = ui.load(srcs[a_key]), ui.load(srcs[b_key])
if run_a is None or run_b is None:
    st.stop()
names = (run_a.label, run_b.label) if run_a.label != run_b.label else ("A", "B")
d = ui.diff(run_a, run_b, names)

tone = diff_tone(d.identical, list(d.iterations.values()), d.aggregate)
{"better": st.success, "worse": st.warning, "same": st.info}[tone](plain(f"Verdict: {d.verdict}"))
best = best_comparison(run_a.decision(), run_b.decision())
if best:
    st.caption(plain(best))

COMPARE_HEADER = ["metric", names[0], names[1], "change", "change (%)"]


def _per_rank(frame: pd.DataFrame) -> pd.DataFrame:
    """The per-rank comparison as the CLI writes it, one block of metric rows per rank pair."""
    rows = []
    for (ra, rb), g in frame.groupby(["rank_a", "rank_b"], sort=True):
        rank = str(ra) if ra == rb else f"{ra}↔{rb}"
        rows += [[rank, *r] for r in metric_rows(g, markup=False, every=True)]
    return pd.DataFrame(rows, columns=["rank", *COMPARE_HEADER])


st.subheader(f"Metrics ({d.aggregation})")
agg = pd.DataFrame(metric_rows(d.aggregate, markup=False, every=True), columns=COMPARE_HEADER)
st.dataframe(agg, hide_index=True, height=36 * (len(agg) + 1) + 2)  # every metric at once, no inner scroll
with st.expander("Per rank"):
    st.dataframe(_per_rank(d.ranks), hide_index=True)

st.subheader("Iterations")
sides = list(d.iterations.values())
keys = [k for k in dict.fromkeys(k for side in sides for k in side) if not any(
    isinstance(side.get(k), list) for side in sides)]
if any(side.get("n") for side in sides):
    rows = []
    for k in keys:
        kind = labels.metric(k).kind
        a, b = (side.get(k) for side in sides)
        both = a is not None and b is not None
        rows.append([labels.label(k), labels.show(k, a) if k in sides[0] else labels.ABSENT,
                     labels.show(k, b) if k in sides[1] else labels.ABSENT,
                     labels.delta(kind, b - a) if both else labels.ABSENT])
    st.dataframe(pd.DataFrame(rows, columns=COMPARE_HEADER[:4]), hide_index=True)
else:
    st.caption("Neither run has profiler steps (ProfilerStep#N) to compare.")

st.subheader("Findings on one side only")
if d.findings.get("status") == "not analyzed":
    st.caption("Findings were not analyzed for these runs.")
else:
    c = st.columns(2)
    for col, side, label in ((c[0], "only_a", names[0]), (c[1], "only_b", names[1])):
        col.markdown(f"**Only in {md(label)}**")
        items = d.findings.get(side) or []
        if not items:
            col.caption("none")
        for f in items:
            col.markdown(f"- {md(f.get('id'))} {md(f.get('title'))}")
    if d.findings.get("both"):
        st.caption("In both: " + ", ".join(d.findings["both"]))

st.subheader("Kernels (by normalized name, per rank)")
k = d.kernels.head(40)
show(readable(k, ["name", "category", "presence", "count_a", "count_b", "total_ns_a", "total_ns_b",
                  "total_ns_delta", "total_rel"],
              headers={"count_a": f"count {names[0]}", "count_b": f"count {names[1]}",
                       "total_ns_a": f"total {names[0]} (ms)", "total_ns_b": f"total {names[1]} (ms)"}))
st.caption(f"The {len(k)} kernels whose total time changed most, of {len(d.kernels)} ({d.kernel_names} names).")

st.subheader("Both timelines, aligned at one iteration")
al = d.alignment
drawn = [ranks.drawn_ranks(run_a), ranks.drawn_ranks(run_b)]  # many ranks: the Timeline's ranks, not every lane
datas = [run_a.timeline(drawn[0]), run_b.timeline(drawn[1])]
bounds = [datas[0].step_window(al.get("step_a")), datas[1].step_window(al.get("step_b"))]
dur = max(t1 - t0 for t0, t1 in bounds)
segments = lod_for_windows(datas, [(t0, t0, t0 + dur) for t0, _ in bounds], width_px=DEFAULT_WIDTH_PX,
                           max_segments=DEFAULT_MAX_SEGMENTS)
diff_fig = timeline_figure(segments)
st.plotly_chart(diff_fig, theme=None, key="diff_timeline", config={"scrollZoom": True, "displaylogo": False})
diff_downloads(d, run_a, run_b, diff_fig, key="diff-dl")
st.caption(f"Aligned at {al.get('how', '')}: A step {al.get('step_a')}, B step {al.get('step_b')}. "
           "The Timeline page shows any other step or window of these runs.")
for run, few in ((run_a, drawn[0]), (run_b, drawn[1])):
    if few is not None:
        st.caption(f"{md(run.label)}: ranks {', '.join(map(str, few))} of {len(run.report().ranks)} (the Timeline's "
                   "ranks; pick others there).")

if d.not_analyzed:
    st.caption("Not compared (not analyzed): " + ", ".join(d.not_analyzed))
if d.notes:
    with st.expander("Notes"):
        for n in d.notes:
            st.caption(md(n))
