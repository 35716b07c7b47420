"""The view in the URL, so a link opens what its sender saw: runs (?runs=, every page), and on the Timeline the
step, the time window (which is also the zoom a box selection sets) and the ranks drawn of a run of many ranks.
The page is the URL's path (st.navigation).

A parameter of the link a session opened with is applied once, the first time its page is drawn (later the
widgets rule, and each run writes their values back); a value equal to the URL's is not written again.
"""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

K_APPLIED = "os_url_applied"


def initial(name: str) -> str | None:
    """The link's value of this parameter, the first time a page asks this session; None after that."""
    applied = st.session_state.setdefault(K_APPLIED, set())
    if name in applied:
        return None
    applied.add(name)
    value = st.query_params.get(name)
    return str(value) if value not in (None, "") else None


def publish(**values: str | None) -> None:
    """Write these parameters (None removes one), each only when it changed."""
    for name, value in values.items():
        current = st.query_params.get(name)
        if value is None or value == "":
            if current is not None:
                del st.query_params[name]
        elif current != value:
            st.query_params[name] = value


def runs_value(labels: Sequence[str]) -> str | None:
    return ",".join(labels) or None


def window_value(a_ms: float, b_ms: float) -> str:
    """'1.250000~3.500000': the window in ms from the step start."""
    return f"{a_ms:.6f}~{b_ms:.6f}"


def parse_window(text: str | None, dur_ms: float) -> tuple[float, float] | None:
    """The window a link names, clipped to the step; None when it is not two numbers in order."""
    if not text:
        return None
    try:
        a, b = (float(x) for x in text.split("~"))
    except ValueError:
        return None
    a, b = min(max(a, 0.0), dur_ms), min(max(b, 0.0), dur_ms)
    return (a, b) if b > a else None


def parse_ranks(text: str | None, known: Sequence[int]) -> list[int] | None:
    """The ranks a link names that the run has (in the link's order); None when none of them is there."""
    if not text:
        return None
    out = []
    for part in text.split(","):
        try:
            r = int(part)
        except ValueError:
            continue
        if r in known and r not in out:
            out.append(r)
    return out or None
