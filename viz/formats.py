"""Number formatting shared by every renderer (ms, percent, durations, the "n/a" of an undefined value).

Shared by the terminal and Markdown output (overlapscope/render*.py), the HTML report
(viz/export_html.py) and the table rows below them, so a figure reads the same everywhere. Values come from
the analysis document (JSON), so an undefined figure arrives as None. Times and ratios read as the
metric registry (viz/labels.py) formats them.
"""

from __future__ import annotations

from .labels import UNDEFINED, number
from .labels import missing as _missing


def ms(ns: float | int | None) -> str:
    """A time in ms without its unit (the column header carries it), as the registry formats it: 12.345."""
    return number("time", ns)


def pct(ratio: float | None) -> str:
    """A ratio in percent, as the registry formats it: 51.1%."""
    return number("ratio", ratio)


def dur(ns: float | int | None) -> str:
    """A duration with a unit that suits it: 850 ns, 42.0 µs, 3.21 ms, 1.204 s."""
    if _missing(ns):
        return UNDEFINED
    a = abs(ns)
    if a < 1_000:
        return f"{int(ns)} ns"
    if a < 1_000_000:
        return f"{ns / 1e3:,.1f} µs"
    if a < 1_000_000_000:
        return f"{ns / 1e6:,.2f} ms"
    return f"{ns / 1e9:,.3f} s"
