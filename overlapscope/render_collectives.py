"""The `collectives` section of `analyze`'s document as a rich table and Markdown.

The section (title, header, rows, caption) comes from viz.collectives_tables, shared with the HTML report.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.table import Table

from viz.collectives_tables import Doc, collectives_section
from viz.safe_text import markdown_row, markdown_text, terminal_text


def collectives_table(doc: Doc, opts: object = None) -> list[RenderableType]:
    """The section as a rich table and its notes (nothing when no communication was recognised)."""
    coll = doc["collectives"]
    sec = collectives_section(coll)
    if sec is None:
        return []
    t = Table(title=terminal_text(sec.title), title_justify="left", header_style="bold",
              caption=terminal_text(sec.caption))
    for i, h in enumerate(sec.header):
        t.add_column(terminal_text(h), justify="left" if i < 2 else "right")
    for row in sec.rows:
        t.add_row(*(terminal_text(c) for c in row))
    return [t, *(f"[dim]collectives: {terminal_text(n)}[/dim]" for n in coll["notes"])]


def collectives_markdown(doc: Doc) -> str:
    """The section as Markdown, its notes below it ("" when no communication was recognised)."""
    coll = doc["collectives"]
    sec = collectives_section(coll)
    if sec is None:
        return ""
    lines = [f"#### {markdown_text(sec.title)}", "", markdown_row(sec.header), "|" + "---|" * len(sec.header)]
    lines += [markdown_row(r) for r in sec.rows]
    lines += ["", markdown_text(sec.caption)]
    lines += [f"- {markdown_text(n)}" for n in coll["notes"]]
    return "\n".join(lines)
