"""`analyze`'s answer as terminal tables, Markdown and CSV, all drawn from its analysis document.

The document is the JSON `analyze -f json` prints (AnalysisReport.document(), decoded) and the report
cache keeps: every format renders from it alone, so a cache hit answers any format without analysing,
and no format can show what the JSON does not hold. Each part of the document is drawn by the section
registered for its key in SECTIONS (ARCHITECTURE.md: "A new analyze section"). Plain Python over
dicts and lists, no pandas.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console, RenderableType
from rich.table import Table

from viz.formats import UNDEFINED, ms, pct  # noqa: F401  (render.pct is the formatter commands use)
from viz.safe_text import csv_cell, markdown_row, markdown_text, terminal_text
from viz.scale_tables import straggler_section
from viz.tables import RANK_COLUMNS, Doc, rank_rows, sync_section

from .render_collectives import collectives_markdown, collectives_table
from .render_critical import critical_markdown, critical_tables
from .render_crossrank import cross_rank_markdown, cross_rank_table, sections_markdown, sections_table
from .render_findings import findings_markdown, findings_table, syncs_table


@dataclass(frozen=True)
class RenderOptions:
    """How the terminal form is drawn (what the document holds is not affected)."""

    streams: bool = False  # per-stream busy time tables


@dataclass(frozen=True)
class DocSection:
    """How one key of the analysis document is drawn: terminal renderables and a Markdown part.

    Both get the whole document (a section may need the label or the ranks) and are called only
    when doc[key] is present and not None; either may be None (that format leaves the key out).
    """

    key: str
    table: Callable[[Doc, RenderOptions], list[RenderableType]] | None
    markdown: Callable[[Doc], str] | None


def report_table(doc: Doc) -> Table:
    title = terminal_text(f"overlap — {doc['label']}" + (f" ({doc['format']})" if doc["format"] else ""))
    table = Table(title=title, title_justify="left", header_style="bold")
    for name, _ in RANK_COLUMNS:
        table.add_column(name, justify="left" if name == "rank" else "right")
    for row in ([terminal_text(c) for c in r] for r in rank_rows(doc)):
        ratio = row[4]
        style = None
        if ratio != UNDEFINED:
            v = float(ratio.rstrip("%")) / 100  # coloured as printed: 29.96 % shows as 30.0 %, yellow
            style = "red" if v < 0.3 else ("yellow" if v < 0.7 else "green")
        row[4] = f"[{style}]{ratio}[/{style}]" if style else ratio
        table.add_row(*row)
    return table


def stream_tables(doc: Doc) -> list[Table]:
    """Per-stream busy time, one table per rank that has GPU activity on a stream."""
    out = []
    for m in doc["ranks"]:
        if not m["streams"]:
            continue
        t = Table(title=terminal_text(f"rank {m['rank']} streams"), title_justify="left", header_style="bold")
        for c in ("device", "stream", "kernels", "busy ms", "comm ms", "compute ms"):
            t.add_column(c, justify="right")
        for r in m["streams"]:
            t.add_row(*(terminal_text(c) for c in (r["device"], r["stream"], r["n"], ms(r["busy_ns"]),
                                                    ms(r["comm_ns"]), ms(r["compute_ns"]))))
        out.append(t)
    return out


def notes(doc: Doc) -> list[str]:
    """The report's notes, then each rank's, as printed."""
    return list(doc["notes"]) + rank_notes(doc)


def rank_notes(doc: Doc) -> list[str]:
    """Each rank's notes, one line per distinct note with the ranks it holds for ('rank 3: ...',
    'ranks 0-1023: ...'), so a note every rank shares is said once."""
    from analyzers.io.rank_select import format_ranks

    by_note: dict[str, list[int]] = {}
    for m in doc["ranks"]:
        for note in dict.fromkeys(m["notes"]):
            by_note.setdefault(note, []).append(m["rank"])
    return [f"rank{'s' if len(rs) > 1 else ''} {format_ranks(rs, 8)}: {note}" for note, rs in by_note.items()]


# --------------------------------------------------------------------------- sections


def _ranks_table(doc: Doc, opts: RenderOptions) -> list[RenderableType]:
    return [report_table(doc), *(stream_tables(doc) if opts.streams else [])]


def _ranks_markdown(doc: Doc) -> str:
    lines = [f"### overlap — {markdown_text(doc['label'])}", ""]
    lines.append(markdown_row([n for n, _ in RANK_COLUMNS]))
    lines.append("|" + "---|" * len(RANK_COLUMNS))
    lines += [markdown_row(row) for row in rank_rows(doc)]
    if n := notes(doc):
        lines += [""] + [f"- {markdown_text(x)}" for x in n]
    return "\n".join(lines)


def _cross_rank_table(doc: Doc, opts: RenderOptions) -> list[RenderableType]:
    cross = doc["cross_rank"]
    if cross["n_matched"]:
        return list(cross_rank_table(cross))
    return [f"[dim]cross-rank: {terminal_text(note)}[/dim]" for note in cross["notes"]]


def _syncs_table(doc: Doc, opts: RenderOptions) -> list[RenderableType]:
    syncs = sync_section(doc)
    return [syncs_table(syncs)] if syncs.get("n") else []


def _notes_table(doc: Doc, opts: RenderOptions) -> list[RenderableType]:
    return ([f"[dim]note: {terminal_text(n)}[/dim]" for n in doc["notes"]]
            + [f"[dim]{terminal_text(n)}[/dim]" for n in rank_notes(doc)])


def _stragglers_table(doc: Doc, opts: RenderOptions) -> list[RenderableType]:
    return list(sections_table([s] if (s := straggler_section(doc["stragglers"])) else []))


def _stragglers_markdown(doc: Doc) -> str:
    return sections_markdown([s] if (s := straggler_section(doc["stragglers"])) else [])


# In display order. Markdown prints the notes under the rank table (its ranks part), the terminal last.
SECTIONS: list[DocSection] = [
    DocSection("ranks", _ranks_table, _ranks_markdown),
    DocSection("cross_rank", _cross_rank_table, lambda doc: cross_rank_markdown(doc["cross_rank"])),
    DocSection("collectives", collectives_table, collectives_markdown),
    DocSection("stragglers", _stragglers_table, _stragglers_markdown),
    DocSection("syncs", _syncs_table, None),
    DocSection("critical_path", lambda doc, opts: list(critical_tables(doc["critical_path"])),
               lambda doc: critical_markdown(doc["critical_path"])),
    DocSection("findings", lambda doc, opts: [findings_table(doc["findings"])],
               lambda doc: findings_markdown(doc["findings"])),
    DocSection("notes", _notes_table, None),
]


def _present(doc: Doc) -> list[DocSection]:
    return [s for s in SECTIONS if doc.get(s.key) is not None]


def print_table(doc: Doc, console: Console, streams: bool = False) -> None:
    """The document as rich tables on console, section after section."""
    opts = RenderOptions(streams=streams)
    for section in _present(doc):
        if section.table is not None:
            for item in section.table(doc, opts):
                console.print(item)


def to_markdown(doc: Doc) -> str:
    """The document as Markdown, its sections separated by blank lines."""
    parts = [s.markdown(doc) for s in _present(doc) if s.markdown is not None]
    return "\n\n".join(p for p in parts if p) + "\n"


CSV_FIELDS = [
    "rank", "source", "comm_ns", "compute_ns", "overlap_ns", "overlap_ratio", "exposed_comm_ns",
    "hidden_fraction_of_min", "busy_ns", "span_ns", "idle_ns", "compute_compute_overlap_ns",
    "n_comm", "n_compute", "n_gpu", "window_start_ns", "window_end_ns",
]


def to_csv(doc: Doc) -> str:
    """One CSV row per rank of the document, raw figures (ns, ratios as fractions; undefined empty); text cells
    through viz.safe_text.csv_cell (no cell a spreadsheet reads as a formula)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for m in doc["ranks"]:
        writer.writerow({k: ("" if m.get(k) is None else csv_cell(m[k])) for k in CSV_FIELDS})
    return buf.getvalue()


def to_json(data: Any) -> str:
    """Indented JSON, encoded by msgspec (NaN -> null, numpy values as numbers)."""
    from analyzers.io.plain import to_json as plain_json  # numpy and pandas: only for what holds them

    return plain_json(data)
