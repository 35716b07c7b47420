"""Rendering of the cross-rank part of the analysis document as rich tables and Markdown.

The sections (title, header, rows, caption) come from viz.crossrank_tables, shared with the
HTML report; this module draws them for a terminal or a Markdown page.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from viz.crossrank_tables import Doc, Section, sections
from viz.safe_text import markdown_row, markdown_text, terminal_text

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
            tables.append(Text(f"{s.title}: none." + (f" {s.caption}" if s.caption else "")))  # Text: no markup
            continue
        t = Table(title=terminal_text(s.title), title_justify="left", header_style="bold",
                  caption=terminal_text(s.caption) if s.caption else None, caption_justify="left")
        for i, h in enumerate(s.header):
            left = i == 0 or h in ("collective", "group", "note", "explains wait") or h.startswith("order") or \
                h in LEFT_COLUMNS
            t.add_column(terminal_text(h), justify="left" if left else "right")
        for row in s.rows:
            t.add_row(*(terminal_text(c) for c in row))  # cells are data: "[stream 7]" is not markup
        tables.append(t)
    return tables


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
        lines += [f"### {markdown_text(s.title)}", ""]
        if s.rows:
            lines.append(markdown_row(s.header))
            lines.append("|" + "|".join("---" for _ in s.header) + "|")
            lines += [markdown_row(row) for row in s.rows]
        else:
            lines.append("(none)")
        if s.caption:
            lines += ["", markdown_text(s.caption)]
        lines.append("")
    return "\n".join(lines)
