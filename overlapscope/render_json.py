"""What `-f json` prints for a report: its raw document, encoded once by msgspec.

Apart from render.py so that the JSON path imports no terminal rendering (rich): `analyze -f json`
starts its per-rank workers that much sooner (common.LazyConsole says why that counts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from analyzers.io.plain import json_bytes

if TYPE_CHECKING:
    from analyzers.report import AnalysisReport


def report_json(report: AnalysisReport) -> bytes:
    """The report as JSON bytes (without the final newline): its raw document encoded once, the same
    bytes as its to_dict() would give."""
    return json_bytes(report.document())
