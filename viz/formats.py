"""Number formatting shared by every renderer (ms, percent, durations, the "n/a" of an undefined value).

Shared by the terminal and Markdown output (overlapscope/render*.py), the HTML report
(viz/export_html.py) and the table rows below them, so a figure reads the same everywhere. Values come from
the analysis document (JSON), so an undefined figure arrives as None.
"""

from __future__ import annotations

import math

UNDEFINED = "n/a"


def _missing(x: float | int | None) -> bool:
    return x is None or (isinstance(x, float) and not math.isfinite(x))


def ms(ns: float | int | None) -> str:
    return UNDEFINED if _missing(ns) else f"{ns / 1e6:.3f}"


def pct(ratio: float | None) -> str:
    return UNDEFINED if _missing(ratio) else f"{100 * ratio:.1f}%"


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
