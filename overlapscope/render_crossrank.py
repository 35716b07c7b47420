"""Rendering of the cross-rank part of the analysis document as rich tables and Markdown.

The sections (title, header, rows, caption) come from viz.crossrank_tables, shared with the
HTML report; this module draws them for a terminal or a Markdown page.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from viz.crossrank_tables import Doc, Section, sections

LEFT_COLUMNS = ("next collective", "waited for", "host", "before its late arrivals")


def cross_rank_table(report: Doc) -> list[RenderableType]:
    """rich tables of the cross-rank report, one per section."""
    return sections_table(sections(report))


def sections_table(secs: list[Section]) -> list[RenderableType]:
    """rich tables, one per section; a section with no rows is one line (its title, "none", its
    caption), never a table of headers alone."""
    tables: list[RenderableType] = []
    for s in secs:
        if not s.rows:
            tables.append(Text(f"{s.title}: none." + (f" {s.caption}" if s.caption else "")))
            continue
        t = Table(title=s.title, title_justify="left", header_style="bold", caption=s.caption or None,
                  caption_justify="left")
        for i, h in enumerate(s.header):
            t.add_column(h, justify="left" if i == 0 or h in ("collective", "group", "note", "explains wait") or
                         h.startswith("order") or h in LEFT_COLUMNS
                         else "right")
        for row in s.rows:
            t.add_row(*(escape(c) for c in row))  # cells are data: "[stream 7]" is not markup
        tables.append(t)
    return tables


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def cross_rank_markdown(report: Doc) -> str:
    """The cross-rank report as a Markdown section (## Cross-rank, one ### per table)."""
    secs = sections(report)
    if not secs:
        return ""
    return "## Cross-rank\n\n" + sections_markdown(secs)


def sections_markdown(secs: list[Section]) -> str:
    """Sections as Markdown, one ### per table."""
    lines: list[str] = []
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
