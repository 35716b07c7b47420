"""The Overview's first screen: the runs ranked by their best timing, each run's top finding with its price
and the step predicted with every fix at once (viz/decision.py holds the figures and their words).

Names (run labels, finding titles) reach the page as table cells or escaped text, never as Markdown.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from viz.decision import DECISION_HEADER, decision_rows, headline, peer_wait_text, ranked, sync_idle_text
from viz.safe_text import csv_cell, markdown_text


def plain(text: str) -> str:
    """text for st.markdown / st.info that shows as written: viz.safe_text's Markdown escaping (emphasis,
    code, links, HTML, images, bare URLs, list and heading marks), the one helper every page uses."""
    return markdown_text(str(text))


def draw(runs: Sequence) -> list:
    """The decision table of these runs (ui.Loaded); returns their RunDecision lines, fastest first."""
    decisions = [r.decision() for r in runs]
    st.subheader("Which run is fastest, why, and what fixing it buys")
    st.success(plain(headline(decisions)))
    table = pd.DataFrame([[csv_cell(c) for c in row] for row in decision_rows(decisions)], columns=DECISION_HEADER)
    st.dataframe(table, hide_index=True, key="decision_table", column_config={
        "best timing (ms)": st.column_config.Column(
            help="the runner's CUDA-event timing (median of the slowest rank) where the run's manifest has one, "
                 "else the traced step (median over profiled steps of the slowest rank)"),
        "top finding's price": st.column_config.Column(
            help="the replayed step with the top finding's fix, minus without it"),
        "fix all (replayed step)": st.column_config.Column(
            help="the dependency graph replayed with every finding's fix at once: step without → with the fixes"),
    })
    for d in ranked(decisions):
        for w in d.warnings:
            st.warning(plain(f"{d.label}: {w}"))
    for r in runs:
        for text in (peer_wait_text(r.report()), sync_idle_text(r.report())):
            if text:
                st.info(plain(f"{r.label}: {text}"))
    return ranked(decisions)
