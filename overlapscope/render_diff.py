"""Rendering of a TraceDiff: rich tables for the terminal and Markdown (JSON is TraceDiff.to_dict).

The numbers come from analyzers.diff and their rows from viz.diff_tables (shared with the HTML
diff report); this module lays them out for a terminal or a Markdown page.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from analyzers.diff import TraceDiff
from viz.diff_tables import (
    KERNEL_NAME_WIDTH,
    UNDEFINED,
    changed_kernels,
    collective_rows,
    kernel_rows,
    metric_rows,
    missing,
    rank_rows,
    value,
)
from viz.safe_text import markdown_row, markdown_text
from viz.safe_text import terminal_text as escape  # a name as text: controls written out, markup escaped


def _rank_list(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks) if ranks else "no rank"


def _finding_line(f: dict[str, Any]) -> str:
    return f"{f.get('id')} [{f.get('severity', '')}]: {f.get('title', '')}"


def _iteration_line(d: TraceDiff) -> str:
    parts = []
    for side, label in zip("AB", d.labels, strict=True):
        it = d.iterations[label]
        if it["n"]:
            steps = it["steps"]
            parts.append(f"{side}: {it['n']} iterations (steps {steps[0]}–{steps[-1]}), "
                         f"{it['kernels_per_step_median']:g} GPU activities per step")
        else:
            parts.append(f"{side}: no iterations")
    return "; ".join(parts)


def _title(d: TraceDiff) -> str:
    a, b = d.labels
    return "diff — A vs B" if (a, b) == ("A", "B") else f"diff — A: {a}  vs  B: {b}"


def _sections_text(d: TraceDiff) -> list[str]:
    out = []
    if d.findings["status"] == "not analyzed":
        out.append("findings: not analyzed")
    else:
        if d.findings["status"] != "analyzed":
            out.append(f"findings: {d.findings['status']}")
        for side, key in ((d.labels[0], "only_a"), (d.labels[1], "only_b")):
            items = d.findings[key]
            if not items:
                out.append(f"findings only in {side}: none")
            for f in items:
                out.append(f"only in {side}: {_finding_line(f)}")
        if d.findings["both"]:
            out.append(f"findings on both sides: {', '.join(d.findings['both'])}")
        for x in d.findings.get("ranks_differ", []):
            out.append(f"{x['id']} on other ranks: {_rank_list(x['ranks_a'])} in {d.labels[0]}, "
                       f"{_rank_list(x['ranks_b'])} in {d.labels[1]}")
    names = {"peer_wait_ns": "peer wait", "blocking_sync_ns": "blocking-sync time", "findings": None}
    missing = [names[m] for m in d.not_analyzed if names.get(m)]
    if missing:
        out.append(f"not analyzed: {', '.join(missing)}")
    return out


def print_diff(d: TraceDiff, console: Console, top: int = 15) -> None:
    """The diff for a terminal: verdict first, then aggregate, per-rank, findings and kernels."""
    console.print(f"[bold]{escape(_title(d))}[/bold]")
    for side, src in zip("AB", d.sources, strict=True):
        console.print(f"[dim]{side}: {escape(', '.join(src))}[/dim]")
    console.print(f"[bold]verdict:[/bold] {escape(d.verdict)}")
    for note in d.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}")

    agg = Table(title=f"all ranks ({d.aggregation})", title_justify="left", header_style="bold")
    for c in ("metric", "A", "B", "Δ", "Δ%"):
        agg.add_column(c, justify="left" if c == "metric" else "right")
    for row in metric_rows(d.aggregate):
        agg.add_row(*row)
    console.print(agg)
    console.print(escape(_iteration_line(d)))

    header, rows = rank_rows(d)
    ranks = Table(title="per rank", title_justify="left", header_style="bold")
    for i, c in enumerate(header):
        ranks.add_column(escape(c), justify="left" if i == 0 else "right")
    for row in rows:
        ranks.add_row(*row)
    console.print(ranks)

    for line in _sections_text(d):
        console.print(escape(line))

    header, rows = collective_rows(d)
    if rows:
        ct = Table(title="collectives: median bus bandwidth per operation and size", title_justify="left",
                   header_style="bold")
        for i, c in enumerate(header):
            ct.add_column(escape(c), justify="left" if i < 2 else "right")
        for row in rows:
            ct.add_row(*[escape(x) for x in row])
        console.print(ct)

    changed = changed_kernels(d)
    if changed.empty:
        console.print(f"kernels ({d.kernel_names} names): no change in count or total time "
                      f"({len(d.kernels)} names)")
        return
    header, rows = kernel_rows(d, top)
    kt = Table(title=f"kernels ({d.kernel_names} names, per rank), largest change in total time first — "
                     f"{len(rows)} of {len(changed)} changed", title_justify="left", header_style="bold")
    for i, c in enumerate(header):
        kt.add_column(escape(c), justify="left" if i < 2 else "right", no_wrap=True,
                      min_width=min(KERNEL_NAME_WIDTH, max((len(r[0]) for r in rows), default=10)) if i == 0 else None)
    for row in rows:
        kt.add_row(*[escape(x) for x in row])
    console.print(kt)


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [markdown_row(header), "|" + "---|" * len(header), *(markdown_row(r) for r in rows)]


def to_markdown(d: TraceDiff, top: int = 15) -> str:
    """The same content as print_diff, as GitHub Markdown (for PR comments and CI summaries)."""
    md = markdown_text
    lines = [f"### {md(_title(d))}", "", f"**verdict:** {md(d.verdict)}", ""]
    for side, label, src in zip("AB", d.labels, d.sources, strict=True):
        lines.append(f"- {side} = {md(label)}: {md(', '.join(src))}")
    lines += [f"- note: {md(n)}" for n in d.notes]
    lines += ["", f"#### all ranks ({d.aggregation})", ""]
    lines += _md_table(["metric", "A", "B", "Δ", "Δ%"], metric_rows(d.aggregate, markup=False))
    lines += ["", md(_iteration_line(d)), "", "#### per rank", ""]
    header, rows = rank_rows(d, markup=False)
    lines += _md_table(header, rows)
    lines += [""] + [f"- {md(s)}" for s in _sections_text(d)]
    header, rows = collective_rows(d)
    if rows:
        lines += ["", "#### collectives: median bus bandwidth per operation and size", ""] + _md_table(header, rows)
    changed = changed_kernels(d)
    if changed.empty:
        lines += ["", md(f"kernels ({d.kernel_names} names): no change in count or total time "
                         f"({len(d.kernels)} names)")]
    else:
        header, rows = kernel_rows(d, top)
        lines += ["", f"#### kernels ({d.kernel_names} names, per rank) — {len(rows)} of {len(changed)} changed", ""]
        lines += _md_table(header, rows)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- n variants (overlapscope sweep)

SWEEP_COLUMNS: list[tuple[str, str, str]] = [  # (column of compare_many, header, kind)
    ("overlap_ratio", "overlap", "ratio"),
    ("overlap_ratio_rank_min", "worst rank", "ratio"),
    ("exposed_comm_ns", "exposed comm", "time"),
    ("iteration_ns_median", "iteration median", "time"),
    ("iteration_ns_worst", "worst", "time"),
    ("spread_ns", "spread ±", "time"),
    ("overlap_points_vs_baseline", "Δ overlap", "points"),
    ("speedup_vs_baseline", "speed-up", "speedup"),
]


def sweep_rows(df: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """analyzers.diff.compare_many's table, formatted: one row per variant, baseline marked."""
    header = ["variant"] + [h for _, h, _ in SWEEP_COLUMNS]
    rows = []
    for r in df.to_dict(orient="records"):
        cells = [f"{r['variant']} (baseline)" if r.get("is_baseline") else str(r["variant"])]
        for col, _, kind in SWEEP_COLUMNS:
            v = r.get(col)
            if kind == "points":
                cells.append(UNDEFINED if missing(v) else ("0" if v == 0 else f"{v:+.1f} pt"))
            elif kind == "speedup":
                cells.append(UNDEFINED if missing(v) else f"{v:.2f}×")
            else:
                cells.append(value(v, kind))
        rows.append(cells)
    return header, rows


def print_sweep(df: pd.DataFrame, console: Console, workload: str = "") -> None:
    header, rows = sweep_rows(df)
    basis = str(df["speed_basis"].iloc[0]) if len(df) else ""
    agg = str(df["aggregation"].iloc[0]) if len(df) else ""
    what = f"{workload}: variants" if workload else "variants"
    t = Table(title=f"{what} ({agg}; speed-up of {basis.replace('_ns', '').replace('_', ' ')})",
              title_justify="left", header_style="bold")
    for i, c in enumerate(header):
        t.add_column(c, justify="left" if i == 0 else "right")
    for row in rows:
        t.add_row(*[escape(x) for x in row])
    console.print(t)


def sweep_markdown(df: pd.DataFrame) -> str:
    header, rows = sweep_rows(df)
    return "\n".join(_md_table(header, rows)) + "\n"
