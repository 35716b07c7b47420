"""Rendering of the cross-rank report (analyzers.crossrank) as rich tables and Markdown.

The sections (title, header, rows, caption) come from viz.crossrank_tables, shared with the
HTML report; this module draws them for a terminal or a Markdown page.
"""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from analyzers.crossrank import CrossRankReport
from viz.crossrank_tables import sections


def cross_rank_table(report: CrossRankReport, stragglers: dict | None = None) -> list[Table]:
    """rich tables of the cross-rank report, one per section (stragglers: the report's straggler view)."""
    tables = []
    for s in sections(report, stragglers):
        t = Table(title=s.title, title_justify="left", header_style="bold", caption=s.caption or None,
                  caption_justify="left")
        for i, h in enumerate(s.header):
            t.add_column(h, justify="left" if i == 0 or h in ("collective", "group", "note", "explains wait") or
                         h.startswith("order") or h in ("next collective", "waited for", "wait per rank", "host",
                                                         "before its late arrivals")
                         else "right")
        for row in s.rows:
            t.add_row(*(escape(c) for c in row))  # cells are data: "[stream 7]" is not markup
        tables.append(t)
    return tables


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def cross_rank_markdown(report: CrossRankReport, stragglers: dict | None = None) -> str:
    """The cross-rank report as a Markdown section (## Cross-rank, one ### per table)."""
    secs = sections(report, stragglers)
    if not secs:
        return ""
    lines = ["## Cross-rank", ""]
    for s in secs:
        lines += [f"### {s.title}", ""]
        if s.rows:
            lines.append("| " + " | ".join(_md_cell(h) for h in s.header) + " |")
            lines.append("|" + "|".join("---" for _ in s.header) + "|")
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in s.rows]
        else:
            lines.append("(none)")
        if s.caption:
            lines += ["", s.caption]
        lines.append("")
    return "\n".join(lines)
