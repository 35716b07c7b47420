"""Number formatting shared by every renderer (ms, percent, the "n/a" of an undefined value).

Its own module so the section renderers (render_crossrank, render_findings) and the report
renderer (render.py) all use it without importing each other in a circle.
"""

from __future__ import annotations

UNDEFINED = "n/a"


def ms(ns: float | int | None) -> str:
    return UNDEFINED if ns is None else f"{ns / 1e6:.3f}"


def pct(ratio: float | None) -> str:
    return UNDEFINED if ratio is None else f"{100 * ratio:.1f}%"
