"""Which ranks the Timeline draws: a run of hundreds of ranks is never drawn lane by lane.

By default a run with more than MANY_RANKS ranks shows three: the slowest (longest GPU span), the
fastest and the median one; the user picks others on the Timeline, or sends ranks there from the
Stragglers page (send_to_timeline). Choices are kept per run in the session.
"""

from __future__ import annotations

import streamlit as st

from analyzers.report import AnalysisReport

from . import ui

MANY_RANKS = 8  # up to this many ranks, the Timeline draws every one
K_TL_RANKS = "os_tl_ranks"  # session state: {source key: [ranks]}


def default_ranks(report: AnalysisReport) -> list[int]:
    """Every rank of a small run; else the slowest, the median and the fastest by GPU span."""
    ranks = [m.rank for m in report.ranks]
    if len(ranks) <= MANY_RANKS:
        return ranks
    by_span = sorted(report.ranks, key=lambda m: (m.whole.span_ns, m.rank))
    picks = [by_span[-1].rank, by_span[len(by_span) // 2].rank, by_span[0].rank]
    return sorted(dict.fromkeys(picks))


def chosen_ranks(run: ui.Loaded) -> list[int]:
    """The ranks the Timeline shows for this run (the user's choice, else default_ranks)."""
    have = {m.rank for m in run.report().ranks}
    picked = [r for r in st.session_state.get(K_TL_RANKS, {}).get(run.source.key, []) if r in have]
    return picked or default_ranks(run.report())


def drawn_ranks(run: ui.Loaded) -> tuple[int, ...] | None:
    """The ranks a page draws a run's timeline of: None (every rank) up to MANY_RANKS, else chosen_ranks."""
    return tuple(chosen_ranks(run)) if len(run.report().ranks) > MANY_RANKS else None


def set_ranks(source_key: str, ranks: list[int]) -> None:
    st.session_state.setdefault(K_TL_RANKS, {})[source_key] = sorted(set(int(r) for r in ranks))


def send_to_timeline(source_key: str, ranks: list[int]) -> None:
    """Show these ranks of the run in the Timeline, and go there."""
    set_ranks(source_key, ranks)
    st.session_state.pop(f"tl_ranks:{source_key}", None)  # the Timeline's picker starts from these
    if source_key not in st.session_state.get(ui.K_SELECTED, []):
        st.session_state[ui.K_SELECTED] = [source_key, *st.session_state.get(ui.K_SELECTED, [])]
    st.switch_page(ui.PAGE_FILES["timeline"])
