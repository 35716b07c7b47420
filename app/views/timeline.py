"""Timeline: ranks x streams lanes of every selected run in one figure with a shared x axis.

The step selector and the time-window slider pick what is sent to the browser; each change
re-aggregates (level of detail) so the figure stays under the segment budget however large
the trace. Box-selecting a range on the chart makes it the new window, at full detail. The step, the window and
the ranks drawn are in the URL (app/url_state.py), so a link opens this view.
"""

from __future__ import annotations

import streamlit as st

from app import ranks, ui, url_state
from app.downloads import run_downloads
from app.tables import readable, show
from viz.critical_figures import critical_overlay
from viz.figures import figure_payload_bytes, timeline_figure
from viz.lod import DEFAULT_MAX_SEGMENTS, DEFAULT_WIDTH_PX
from viz.safe_text import markdown_text as md  # names from trace files: text, never Markdown
from viz.timeline import lod_for_windows

st.title("Timeline")
runs = ui.load_selected()
if not runs:
    st.stop()
shown: dict[str, list[int] | None] = {}
for r in runs:  # a run of many ranks draws the ranks picked here (default: slowest, median, fastest)
    all_ranks = [m.rank for m in r.report().ranks]
    if len(all_ranks) <= ranks.MANY_RANKS:
        shown[r.source.key] = None
        continue
    linked = url_state.parse_ranks(url_state.initial("ranks"), all_ranks)  # ?ranks= of a shared link
    if linked:
        ranks.set_ranks(r.source.key, linked)
        st.session_state[f"tl_ranks:{r.source.key}"] = linked
    picked = st.multiselect(f"Ranks of {md(r.label)} ({len(all_ranks)} ranks)", all_ranks, ranks.chosen_ranks(r),
                            key=f"tl_ranks:{r.source.key}",
                            help="A run of many ranks is drawn for the ranks picked here: by default the slowest "
                                 "(longest GPU span), the median and the fastest; the Stragglers page sends others.")
    ranks.set_ranks(r.source.key, picked)
    shown[r.source.key] = ranks.chosen_ranks(r)
datas = [r.timeline(tuple(shown[r.source.key]) if shown[r.source.key] is not None else None) for r in runs]
focus = ui.pop_focus()

WHOLE = "whole trace"
steps = sorted({int(s) for d in datas for s in d.steps["step"].tolist()})
options = [WHOLE, *steps]
if focus is not None:
    st.session_state["tl_step"] = WHOLE
linked_step = url_state.initial("step")  # ?step= of a shared link: a step number or "whole"
if linked_step is not None and focus is None:
    st.session_state["tl_step"] = WHOLE if linked_step == "whole" else next(
        (s for s in steps if str(s) == linked_step), st.session_state.get("tl_step"))
if st.session_state.get("tl_step") not in options:
    st.session_state["tl_step"] = steps[len(steps) // 2] if steps else WHOLE  # a middle step: warmed up

with st.expander("Display and level of detail"):
    c = st.columns(3)
    width_px = int(c[0].number_input("Pixels across (merge intervals closer than one)", 200, 8000,
                                     DEFAULT_WIDTH_PX, step=100, key="tl_width"))
    max_segments = int(c[1].number_input("Segment budget (all runs)", 1000, 400_000, DEFAULT_MAX_SEGMENTS,
                                         step=10_000, key="tl_budget"))
    lane_px = int(c[2].number_input("Lane height (px)", 10, 60, 22, step=2, key="tl_lane_px"))
    critical = st.checkbox("Outline the critical path (the activities that set each step's end)", value=True,
                           key="tl_critical")

cols = st.columns([1, 3])
step = cols[0].selectbox("Step", options, key="tl_step",
                         format_func=lambda s: s if s == WHOLE else f"step {s}",
                         help="Runs are aligned at the start of this step (ProfilerStep#N).")
bounds = [d.step_window(None if step == WHOLE else int(step)) for d in datas]
dur_ns = max(max(t1 - t0 for t0, t1 in bounds), 1)
dur_ms = dur_ns / 1e6
slider_key = f"tl_window:{step}:{dur_ns}"

# A focus (a link from another page) or a box selection on the chart sets the window.
if focus is not None:
    idx = next((i for i, r in enumerate(runs) if r.source.key == focus["source"]), 0)
    t0 = bounds[idx][0]
    a = min(max((int(focus["lo"]) - t0) / 1e6, 0.0), dur_ms)
    b = min(max((int(focus["hi"]) - t0) / 1e6, a), dur_ms)
    st.session_state[slider_key] = (a, b)
linked_window = url_state.parse_window(url_state.initial("window"), dur_ms)  # ?window= of a shared link
if linked_window is not None and focus is None:
    st.session_state[slider_key] = linked_window
chart_state = st.session_state.get("tl_chart")
try:
    boxes = chart_state["selection"]["box"] if chart_state else []
except (KeyError, TypeError):
    boxes = []
if boxes:
    xs = boxes[-1].get("x") or []
    sig = (slider_key, tuple(round(float(v), 9) for v in xs))
    if len(xs) == 2 and st.session_state.get("tl_last_box") != sig:
        st.session_state["tl_last_box"] = sig
        lo_ms, hi_ms = sorted(float(v) for v in xs)
        st.session_state[slider_key] = (max(lo_ms, 0.0), min(hi_ms, dur_ms))

kwargs = {} if slider_key in st.session_state else {"value": (0.0, dur_ms)}
a_ms, b_ms = cols[1].slider("Time window (ms from the step start)", 0.0, dur_ms, key=slider_key,
                            step=max(dur_ms / 2000, 1e-6), format="%.3f", **kwargs)
if b_ms <= a_ms:
    b_ms = min(a_ms + dur_ms / 2000, dur_ms)

many = next((shown[r.source.key] for r in runs if shown[r.source.key] is not None), None)
url_state.publish(step="whole" if step == WHOLE else str(step), window=url_state.window_value(a_ms, b_ms),
                  ranks=",".join(map(str, many)) if many else None)
windows = [(t0, t0 + int(a_ms * 1e6), t0 + int(b_ms * 1e6)) for t0, _ in bounds]
segments = lod_for_windows(datas, windows, width_px=width_px, max_segments=max_segments)
fig = timeline_figure(segments, width_px=width_px, lane_px=lane_px)
if critical:
    critical_overlay(fig, segments, [ui.aligned_set(r) for r in runs], [r.report().critical_path for r in runs])
st.plotly_chart(fig, theme=None, key="tl_chart", on_select="rerun", selection_mode="box",
                config={"scrollZoom": True, "displaylogo": False})
run_downloads(runs, fig, key="tl-dl")

n_seg = sum(len(s.segments) for s in segments)
n_in = sum(int(((d.ends > lo) & (d.starts < hi)).sum()) for d, (_, lo, hi) in zip(datas, windows, strict=True))
threshold_us = max(s.segments.threshold_ns for s in segments) / 1e3
st.caption(f"{n_seg:,} segments drawn for {n_in:,} intervals in the window "
           f"(intervals closer than {threshold_us:,.2f} µs merged; payload "
           f"{figure_payload_bytes(fig) / 1e6:.2f} MB). Zoom: drag on the chart; box-select (toolbar) "
           "re-aggregates that range at full detail.")
missing = [r.label for r, d in zip(runs, datas, strict=True) if step != WHOLE and int(step) not in set(
    d.steps["step"].tolist())]
if missing:
    st.warning(f"Step {step} is not in {md(', '.join(missing))}: shown from its trace start instead.")
for d in datas:
    for n in d.notes:
        st.caption(md(n))

st.subheader("Metrics in this window")
rows = []
for run, (_, lo, hi) in zip(runs, windows, strict=True):
    for rank in shown[run.source.key] or run.traces().rank_ids():
        rows.append({"run": run.label, "rank": rank, **run.window_metrics(rank, lo, hi).to_dict()})
show(readable(rows, ["run", "rank", "overlap_ratio", "comm_ns", "compute_ns", "overlap_ns", "exposed_comm_ns",
                     "idle_ns", "n_gpu"]))
