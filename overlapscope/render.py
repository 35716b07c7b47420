"""Rendering of analysis data for the terminal: rich tables, Markdown, CSV, JSON.

Analyses return data (analyzers.report); only this module and app/ turn it into text.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from analyzers.io.plain import to_json as plain_json
from analyzers.report import AnalysisReport
from viz.formats import UNDEFINED, ms, pct  # noqa: F401  (render.pct is the formatter commands use)
from viz.tables import RANK_COLUMNS, rank_rows

from .render_crossrank import cross_rank_markdown, cross_rank_table
from .render_findings import findings_markdown, findings_table, syncs_table


def report_table(report: AnalysisReport) -> Table:
    title = f"overlap — {report.label}" + (f" ({report.fmt})" if report.fmt else "")
    table = Table(title=title, title_justify="left", header_style="bold")
    for name, _ in RANK_COLUMNS:
        table.add_column(name, justify="left" if name == "rank" else "right")
    for row in rank_rows(report):
        ratio = row[4]
        style = None
        if ratio != UNDEFINED:
            v = float(ratio.rstrip("%")) / 100
            style = "red" if v < 0.3 else ("yellow" if v < 0.7 else "green")
        row[4] = f"[{style}]{ratio}[/{style}]" if style else ratio
        table.add_row(*row)
    return table


def stream_tables(report: AnalysisReport) -> list[Table]:
    out = []
    for m in report.ranks:
        t = Table(title=f"rank {m.rank} streams", title_justify="left", header_style="bold")
        for c in ("device", "stream", "kernels", "busy ms", "comm ms", "compute ms"):
            t.add_column(c, justify="right")
        for r in m.streams.itertuples(index=False):
            t.add_row(str(r.device), str(r.stream), str(r.n), ms(r.busy_ns), ms(r.comm_ns), ms(r.compute_ns))
        out.append(t)
    return out


def _all_syncs(report: AnalysisReport):
    import pandas as pd

    frames = [df for df in report.syncs.values() if len(df)]
    return pd.concat(frames, ignore_index=True) if frames else None


def print_table(report: AnalysisReport, console: Console, streams: bool = False) -> None:
    console.print(report_table(report))
    if streams:
        for t in stream_tables(report):
            console.print(t)
    if report.cross_rank is not None and report.cross_rank.n_matched:
        for t in cross_rank_table(report.cross_rank, report.stragglers):
            console.print(t)
    elif report.cross_rank is not None:
        for note in report.cross_rank.notes:
            console.print(f"[dim]cross-rank: {note}[/dim]")
    syncs = _all_syncs(report)
    if syncs is not None:
        console.print(syncs_table(syncs))
    if report.findings is not None:
        console.print(findings_table(report.findings))
    for note in report.notes:
        console.print(f"[dim]note: {note}[/dim]")
    for note in rank_notes(report):
        console.print(f"[dim]{escape(note)}[/dim]")


def rank_notes(report: AnalysisReport) -> list[str]:
    """Each rank's notes, one line per distinct note with the ranks it holds for ('rank 3: ...',
    'ranks 0-1023: ...'), so a note every rank shares is said once."""
    from analyzers.io.rank_select import format_ranks

    by_note: dict[str, list[int]] = {}
    for m in report.ranks:
        for note in dict.fromkeys(m.notes):
            by_note.setdefault(note, []).append(m.rank)
    return [f"rank{'s' if len(rs) > 1 else ''} {format_ranks(rs, 8)}: {note}" for note, rs in by_note.items()]


def to_markdown(report: AnalysisReport) -> str:
    lines = [f"### overlap — {report.label}", ""]
    lines.append("| " + " | ".join(n for n, _ in RANK_COLUMNS) + " |")
    lines.append("|" + "---|" * len(RANK_COLUMNS))
    for row in rank_rows(report):
        lines.append("| " + " | ".join(row) + " |")
    notes = list(report.notes) + rank_notes(report)
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    if report.cross_rank is not None:
        lines += ["", cross_rank_markdown(report.cross_rank, report.stragglers)]
    if report.findings is not None:
        lines += ["", findings_markdown(report.findings)]
    return "\n".join(lines) + "\n"


CSV_FIELDS = [
    "rank", "source", "comm_ns", "compute_ns", "overlap_ns", "overlap_ratio", "exposed_comm_ns",
    "hidden_fraction_of_min", "busy_ns", "span_ns", "idle_ns", "compute_compute_overlap_ns",
    "n_comm", "n_compute", "n_gpu", "window_start_ns", "window_end_ns",
]


def to_csv(report: AnalysisReport) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for m in report.ranks:
        row: dict[str, Any] = {"rank": m.rank, "source": m.source, **m.whole.to_dict()}
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buf.getvalue()


def to_json(data: Any) -> str:
    """Indented JSON, encoded by msgspec (NaN -> null, numpy values as numbers)."""
    return plain_json(data)
