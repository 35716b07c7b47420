"""Number formatting shared by every renderer (ms, percent, the "n/a" of an undefined value).

Shared by the terminal and Markdown output (overlapscope/render*.py), the HTML report
(viz/export_html.py) and the table rows below them, so a figure reads the same everywhere.
"""

from __future__ import annotations

UNDEFINED = "n/a"


def ms(ns: float | int | None) -> str:
    return UNDEFINED if ns is None else f"{ns / 1e6:.3f}"


def pct(ratio: float | None) -> str:
    return UNDEFINED if ratio is None else f"{100 * ratio:.1f}%"
