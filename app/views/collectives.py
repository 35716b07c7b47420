"""Collectives: bus bandwidth against message size, alone or overlapped with compute, per run.

Each point is one communication activity of the collectives table (analyzers.crossrank.collective_table):
NCCL's bus bandwidth on its transfer time (peer wait excluded where the collective was matched across
ranks). Click a point to see that collective on the Timeline; the table below gives the medians per
operation and size.
"""

from __future__ import annotations

import streamlit as st

from app import ui
from app.tables import readable, show
from viz.collectives_figure import busbw_figure, plottable
from viz.safe_text import markdown_text as md  # names from trace files: text, never Markdown

st.title("Collectives")
runs = ui.load_selected()
if not runs:
    st.stop()

for run in runs:
    st.header(md(run.label))
    report = run.report()
    table = report.collectives
    if table is None or table.rows.empty:
        st.info("No communication recognised in this run (name custom kernels with --comm-kernel or --rules).")
        continue
    rows = table.rows
    c = st.columns(4)
    c[0].metric("Communication activities", f"{len(rows):,}")
    c[1].metric("Overlapped with compute", f"{int(rows['overlapped'].sum()):,}")
    c[2].metric("Median bus bandwidth", "–" if rows["busbw_gbps"].isna().all()
                else f"{rows['busbw_gbps'].median():,.1f} GB/s")
    c[3].metric("Link peak", f"{table.link_gbps:,.0f} GB/s" if table.link_gbps else "unknown",
                help=table.link_source)
    key = f"coll-fig-{run.source.key}"
    if plottable(rows).empty:
        st.caption("No activity carries a message size: no bandwidth to plot.")
    else:
        st.plotly_chart(busbw_figure(rows, table.link_gbps), theme=None, key=key, on_select="rerun",
                        selection_mode="points")
        state = st.session_state.get(key)
        points = (state or {}).get("selection", {}).get("points", []) if state else []
        picked = [p for p in points if p.get("customdata") is not None]
        if picked:
            r = rows.loc[int(picked[0]["customdata"][0])]
            offset = int(report.clock_offsets_ns.get(int(r["rank"]), 0))  # the Timeline draws aligned clocks
            ui.timeline_button(f"Show this {r['op']} (rank {int(r['rank'])}) in the timeline", run.source.key,
                               int(r["start_ns"]) + offset, int(r["end_ns"]) + offset, key=f"coll-go-{run.source.key}",
                               pad=2.0)
        else:
            st.caption("Click a point to see that collective in the timeline.")
    st.caption("Medians per operation and message size (bus bandwidth overall, alone and overlapped with "
               "compute; of link: the median against the link's peak).")
    show(readable(table.groups, ["op", "size_bucket", "n", "n_overlapped", "bytes_median", "transfer_median_ns",
                                 "wait_median_ns", "busbw_median_gbps", "busbw_alone_median_gbps",
                                 "busbw_overlapped_median_gbps", "link_fraction"],
                  headers={"n": "activities", "n_overlapped": "overlapped", "bytes_median": "size (MiB)",
                           "transfer_median_ns": "transfer (ms)", "wait_median_ns": "wait (ms)",
                           "busbw_median_gbps": "busbw (GB/s)", "busbw_alone_median_gbps": "alone (GB/s)",
                           "busbw_overlapped_median_gbps": "overlapped (GB/s)", "link_fraction": "of link"}),
         key=f"coll-table-{run.source.key}")
    for note in table.notes:
        st.caption(md(note))
