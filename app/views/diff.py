"""Diff: two runs (schedule variants) side by side: metrics, findings, kernels and both timelines.

Everything is analyzers.diff.diff_reports (one definition of the comparison, shared with
`overlapscope diff`); the timelines are aligned at the iteration the diff aligned on.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import ui
from app.downloads import diff_downloads
from viz.figures import timeline_figure
from viz.lod import DEFAULT_MAX_SEGMENTS, DEFAULT_WIDTH_PX
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

(st.info if d.identical else st.success)(d.verdict)

TIME_MARK = r"_ns(?=_|$)"  # iteration_ns_median, comm_ns, ...


def _readable(df: pd.DataFrame) -> pd.DataFrame:
    """Nanosecond metrics (names with _ns) in ms, ratios as they are; missing values blank."""
    out = df.copy()
    metric = out["metric"].astype(str)
    is_time = metric.str.contains(TIME_MARK, regex=True)
    for col in ("a", "b", "delta", "rel"):
        if col in out:
            vals = pd.to_numeric(out[col], errors="coerce").astype(float)
            out[col] = vals.where(~is_time, vals / 1e6) if col != "rel" else vals
    out["metric"] = metric.where(~is_time, metric.str.replace(TIME_MARK, "", regex=True) + " (ms)")
    return out.rename(columns={"a": names[0], "b": names[1]})


st.subheader(f"Metrics ({d.aggregation})")
st.dataframe(_readable(d.aggregate), hide_index=True,
             column_config={"rel": st.column_config.NumberColumn("change", format="percent")})
with st.expander("Per rank"):
    st.dataframe(_readable(d.ranks), hide_index=True,
                 column_config={"rel": st.column_config.NumberColumn("change", format="percent")})

st.subheader("Iterations")
its = pd.DataFrame({side: {k: v for k, v in stats.items() if not isinstance(v, list)}
                    for side, stats in d.iterations.items()})
if not its.empty:
    its = its.rename_axis("metric").reset_index()
    its.insert(3, "delta", its.iloc[:, 2].astype(float) - its.iloc[:, 1].astype(float))
    st.dataframe(_readable(its.rename(columns={its.columns[1]: "a", its.columns[2]: "b"})), hide_index=True)

st.subheader("Findings on one side only")
if d.findings.get("status") == "not analyzed":
    st.caption("Findings were not analyzed for these runs.")
else:
    c = st.columns(2)
    for col, side, label in ((c[0], "only_a", names[0]), (c[1], "only_b", names[1])):
        col.markdown(f"**Only in {label}**")
        items = d.findings.get(side) or []
        if not items:
            col.caption("none")
        for f in items:
            col.markdown(f"- `{f.get('id')}` {f.get('title')}")
    if d.findings.get("both"):
        st.caption("In both: " + ", ".join(d.findings["both"]))

st.subheader("Kernels (by normalized name, per rank)")
k = d.kernels.head(40)
st.dataframe(k.assign(**{"total A (ms)": k["total_ns_a"] / 1e6, "total B (ms)": k["total_ns_b"] / 1e6,
                         "total delta (ms)": k["total_ns_delta"] / 1e6})[
    ["name", "category", "presence", "count_a", "count_b", "total A (ms)", "total B (ms)", "total delta (ms)",
     "total_rel"]], hide_index=True,
    column_config={"total_rel": st.column_config.NumberColumn("change", format="percent")})
st.caption(f"The {len(k)} kernels whose total time changed most, of {len(d.kernels)} ({d.kernel_names} names).")

st.subheader("Both timelines, aligned at one iteration")
al = d.alignment
datas = [run_a.timeline(), run_b.timeline()]
bounds = [datas[0].step_window(al.get("step_a")), datas[1].step_window(al.get("step_b"))]
dur = max(t1 - t0 for t0, t1 in bounds)
segments = lod_for_windows(datas, [(t0, t0, t0 + dur) for t0, _ in bounds], width_px=DEFAULT_WIDTH_PX,
                           max_segments=DEFAULT_MAX_SEGMENTS)
diff_fig = timeline_figure(segments)
st.plotly_chart(diff_fig, theme=None, key="diff_timeline", config={"scrollZoom": True, "displaylogo": False})
diff_downloads(d, run_a, run_b, diff_fig, key="diff-dl")
st.caption(f"Aligned at {al.get('how', '')}: A step {al.get('step_a')}, B step {al.get('step_b')}. "
           "The Timeline page shows any other step or window of these runs.")

if d.not_analyzed:
    st.caption("Not compared (not analyzed): " + ", ".join(d.not_analyzed))
if d.notes:
    with st.expander("Notes"):
        for n in d.notes:
            st.caption(n)
