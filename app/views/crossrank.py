"""Cross-rank: when each rank reached each collective, who waited for whom, and order mismatches.

A collective cannot move data before its last rank arrives; the time the early ranks spend
spinning inside it is not communication that compute could hide. Everything shown comes
from analyzers.crossrank; rows link to their time range in the Timeline. Past MANY_RANKS ranks the
heatmap and the bars draw the Timeline's ranks (by default the slowest, the median and the fastest; the
Stragglers page has every rank's lateness), and the tables list every rank.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import ranks, ui
from app.tables import readable, show
from viz.figures import peer_wait_bars, skew_heatmap
from viz.safe_text import markdown_text as md  # names from trace files: text, never Markdown
from viz.scale_figures import MANY_RANKS

CLOCK_METHODS = {  # analyzers.crossrank.clock's methods, in words
    "same-file": "one file, one clock", "same-host": "one host, one clock",
    "verified-by-collective-ends": "one clock (collective ends agree)", "session-start": "offsets from session starts",
    "matched-collective-ends": "offsets from matched collective ends",
}

st.title("Cross-rank")
runs = ui.load_selected()
if not runs:
    st.stop()
try:
    import analyzers.crossrank  # noqa: F401
except ImportError:
    ui.not_available("Cross-rank analysis", "analyzers.crossrank")
    st.stop()


def _pick_row(frame: pd.DataFrame, key: str, caption: str) -> int | None:
    """A selectable table; the position of the selected row (or None) so the page can offer a jump."""
    show(frame, key=key, on_select="rerun", selection_mode="single-row")
    state = st.session_state.get(key)
    rows = state["selection"]["rows"] if state else []
    if not rows or rows[0] >= len(frame):
        st.caption(md(caption))
        return None
    return int(rows[0])


for run in runs:
    st.header(md(run.label))
    rep = run.cross_rank()
    if rep is None:
        st.info("Cross-rank analysis needs two or more ranks; this run has one.")
        continue
    c = st.columns(4)
    c[0].metric("Matched collectives", f"{rep.n_matched:,}")
    total_wait = sum(int(v.get("wait_ns") or 0) for v in rep.peer_wait.values())
    c[1].metric("Waiting for peers (all ranks)", ui.ms(total_wait))
    c[2].metric("Order mismatches", f"{len(rep.mismatches):,}")
    clock = rep.clock
    c[3].metric("Clock alignment", CLOCK_METHODS.get(clock.method, clock.method) if clock else "–",
                help=clock.reason if clock else "no clock alignment (single rank)")
    if clock is not None:
        offs = ", ".join(f"rank {r}: {ui.ms(v)}" for r, v in clock.offsets_ns.items())
        st.caption(f"Offsets {'applied' if clock.applied else 'not applied'} ({offs}); residual skew of "
                   f"matched ends {ui.ms(clock.residual_skew_ns)}. {clock.reason}")

    colls = rep.collectives_by_rank()
    drawn = ranks.chosen_ranks(run) if len(rep.ranks) > MANY_RANKS else list(rep.ranks)
    few_note = (f"Ranks {', '.join(map(str, drawn))} of {len(rep.ranks)}: the Timeline's ranks (pick others there or "
                "on the Stragglers page, which draws every rank's lateness)." if len(drawn) < len(rep.ranks) else "")
    st.subheader("Arrival skew")
    st.plotly_chart(skew_heatmap(colls, drawn), theme=None, key=f"xr-heat-{run.source.key}")
    if few_note:
        st.caption(few_note)
    if not colls.empty:
        end_cols = [c for c in colls.columns if c.startswith("end_ns_r")]
        ends = colls[end_cols].max(axis=1).astype("int64") if end_cols else colls["arrival_ns"]
        view = colls.assign(start_ns=colls["first_start_ns"], end_ns=ends)
        pos = _pick_row(readable(view, ["coll_id", "group", "coll_name", "n_ranks", "skew_ns", "late_rank",
                                        "max_wait_ns", "total_wait_ns"], headers={"coll_name": "kernel"}),
                        f"xr-colls-{run.source.key}", "Select a collective to see it in the timeline.")
        if pos is not None:
            row = view.iloc[pos]
            ui.timeline_button(f"Show collective #{int(row['coll_id'])} in the timeline", run.source.key,
                               int(row["start_ns"]), int(row["end_ns"]), key=f"xr-go-c-{run.source.key}", pad=0.5)

    st.subheader("Peer wait per rank")
    pw = pd.DataFrame([{"rank": r, **{k: v for k, v in d.items() if not isinstance(v, dict)}}
                       for r, d in rep.peer_wait.items()])
    if pw.empty or pw["n_collectives"].sum() == 0:
        st.caption("No peer wait measured (no collective whose peers are all in these traces).")
    else:
        st.plotly_chart(peer_wait_bars(pw[pw["rank"].isin(drawn)]), theme=None, key=f"xr-pw-{run.source.key}")
        if few_note:
            st.caption(few_note + " The table lists every rank.")
        show(readable(pw, ["rank", "n_collectives", "wait_ns", "transfer_ns", "wait_fraction", "overlap_ratio",
                           "effective_overlap_ratio", "n_late"]))
    if rep.late_ranks:
        st.markdown("**Late ranks** (the last to arrive, and the wait they caused)")
        show(readable(rep.late_ranks, [k for k in rep.late_ranks[0] if not isinstance(rep.late_ranks[0][k],
                                                                                      (dict, list))]))

    st.subheader("Scheduling-order mismatches")
    mm = rep.mismatches
    if mm.empty:
        summary = rep.mismatch_summary or {}
        st.caption(f"None: {summary.get('kernels_compared', 0):,} kernels compared across "
                   f"{summary.get('role_pairs', 0)} stream-role pair(s).")
    else:
        starts = mm[["x_start_ns_a", "y_start_ns_a", "x_start_ns_b", "y_start_ns_b"]].min(axis=1)
        ends = mm["dependency_start_ns"].astype("int64") + mm["max_wait_ns"].fillna(0).astype("int64")
        shown = readable(mm, ["rank_a", "rank_b", "step", "coll_name", "kernel_x", "stream_x", "kernel_y", "stream_y",
                              "first_on_a", "first_on_b", "waiting_rank", "late_rank", "wait_caused_ns"],
                         headers={"coll_name": "next collective"})
        pos = _pick_row(shown, f"xr-mm-{run.source.key}", "Select a mismatch to see it in the timeline.")
        if pos is not None:
            ui.timeline_button("Show this mismatch in the timeline", run.source.key, int(starts.iloc[pos]),
                               int(ends.iloc[pos]), key=f"xr-go-m-{run.source.key}", pad=0.3)
    if rep.notes:
        with st.expander("Notes from the cross-rank analysis"):
            for n in rep.notes:
                st.caption(md(n))
