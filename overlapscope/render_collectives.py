"""Rendering of the collectives table (analyzers.crossrank.collective_table) as a rich table and Markdown.

The section (title, header, rows, caption) comes from viz.collectives_tables, shared with the HTML report.
"""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from analyzers.crossrank.collective_table import CollectiveTable
from viz.collectives_tables import collectives_section


def collectives_table(table: CollectiveTable) -> list[Table]:
    """The section as a rich table (none when no communication was recognised)."""
    sec = collectives_section(table)
    if sec is None:
        return []
    t = Table(title=sec.title, caption=escape(sec.caption))
    for i, h in enumerate(sec.header):
        t.add_column(h, justify="left" if i < 2 else "right")
    for row in sec.rows:
        t.add_row(*(escape(c) for c in row))
    return [t]


def collectives_markdown(table: CollectiveTable) -> str:
    """The section as Markdown ("" when no communication was recognised), notes below it."""
    sec = collectives_section(table)
    if sec is None:
        return ""
    lines = [f"#### {sec.title}", "", "| " + " | ".join(sec.header) + " |", "|" + "---|" * len(sec.header)]
    lines += ["| " + " | ".join(r) + " |" for r in sec.rows]
    lines += ["", sec.caption]
    lines += [f"- {n}" for n in table.notes]
    return "\n".join(lines)
