"""No table of headers alone: a section with nothing to list is one line saying so, in the terminal and
in the HTML report; a section with rows stays a table."""

from __future__ import annotations

import os
import subprocess
import sys

from viz.export_html import html_table

from .conftest import ROOT, SAMPLES


def analyze_table(run: str) -> str:
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "overlapscope", "analyze", "--streams", str(SAMPLES / run)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def empty_tables(text: str) -> list[str]:
    """Titles of rich tables whose header rule is followed at once by the bottom rule (no rows)."""
    lines = text.splitlines()
    return [lines[i - 3].strip() for i in range(3, len(lines) - 1)
            if lines[i].startswith("┡") and lines[i + 1].startswith("└")]


def test_empty_table_finder_sees_a_table_without_rows():
    from rich.console import Console
    from rich.table import Table

    console = Console(record=True, width=80)
    for rows in ([], [["1", "2"]]):
        t = Table(title=f"{len(rows)} rows")
        t.add_column("a")
        t.add_column("b")
        for r in rows:
            t.add_row(*r)
        console.print(t)
    assert empty_tables(console.export_text()) == ["0 rows"]


def test_a_run_without_order_mismatches_says_so_in_one_line():
    out = analyze_table("ag-gemm/host-sync")
    assert empty_tables(out) == []
    assert "Scheduling-order mismatches: none. 0 mismatches before a cross-rank dependency" in out
    assert "┃ order on first rank" not in out


def test_a_run_with_order_mismatches_keeps_its_table():
    out = analyze_table("symm-mem/two-stream")
    assert empty_tables(out) == []
    assert "Scheduling-order mismatches" in out and "order on first rank" in out
    assert "Scheduling-order mismatches: none" not in out


def test_html_tables_without_rows_are_a_none_line():
    assert html_table(["kernel", "Δ"], []) == '<p class="muted">none</p>'
    filled = html_table(["kernel", "Δ"], [["gemm", "+1"]])
    assert filled.startswith("<table>") and "<td class=\"t\">gemm</td>" in filled
