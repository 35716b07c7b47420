"""Download buttons for what a page shows: Perfetto JSON, the HTML report, the figure as PNG.

The same files `overlapscope export` writes (viz/export_html.py, viz/perfetto_json.py).
Each file is made only when its button is clicked (Streamlit calls the data function then),
so a page of a million-kernel run does not pay for exports nobody asked for.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from analyzers.export.perfetto import perfetto_data
from viz.export_html import ImageExportError, diff_html, figure_image, report_html
from viz.perfetto_json import encode_perfetto
from viz.safe_text import markdown_text as md  # names from trace files: text, never Markdown


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_") or "trace"


def _png(fig: go.Figure) -> bytes:
    try:
        return figure_image(fig, "png", width=int(fig.layout.width or 1600))
    except ImageExportError as exc:
        st.error(md(exc))
        return b""


def run_downloads(runs: Sequence[Any], fig: go.Figure | None, key: str) -> None:
    """Per run its Perfetto trace and HTML report, and the figure on screen as a PNG (ui.Loaded runs)."""
    with st.expander("Download: Perfetto trace, HTML report, PNG"):
        if fig is not None:
            st.download_button("Timeline as shown (PNG)", data=lambda: _png(fig), file_name="timeline.png",
                               mime="image/png", key=f"{key}-png", on_click="ignore")
        for run in runs:
            name = _slug(run.label)
            c = st.columns(2)
            c[0].download_button(
                f"{md(run.label)}: Perfetto trace (.json.gz)", file_name=f"{name}.perfetto.json.gz",
                data=lambda run=run: encode_perfetto(perfetto_data(run.traces(), run.full_report()), gz=True),
                mime="application/gzip", key=f"{key}-pf-{run.source.key}", on_click="ignore",
                help="Every GPU activity, ranks on one clock, with overlap / peer-wait / sync / finding tracks: "
                     "open it at ui.perfetto.dev.")
            c[1].download_button(
                f"{md(run.label)}: HTML report", file_name=f"{name}.html", mime="text/html",
                data=lambda run=run: report_html(run.traces(), run.full_report(), run.timeline()),
                key=f"{key}-html-{run.source.key}", on_click="ignore",
                help="A self-contained page (no network needed): metrics, findings, cross-rank, timeline.")


def diff_downloads(d: Any, run_a: Any, run_b: Any, fig: go.Figure | None, key: str) -> None:
    """The diff's HTML report and its timeline figure as a PNG."""
    with st.expander("Download: HTML diff report, PNG"):
        c = st.columns(2)
        c[0].download_button(
            "Diff report (HTML)", file_name=f"diff_{_slug(d.labels[0])}_vs_{_slug(d.labels[1])}.html",
            mime="text/html", key=f"{key}-html", on_click="ignore",
            data=lambda: diff_html(d, [(run_a.traces(), run_a.full_report()), (run_b.traces(), run_b.full_report())]))
        if fig is not None:
            c[1].download_button("Both timelines (PNG)", data=lambda: _png(fig), file_name="diff_timeline.png",
                                 mime="image/png", key=f"{key}-png", on_click="ignore")
