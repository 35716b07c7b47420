"""Rendering of findings and blocking host syncs: rich tables for the terminal, Markdown for reports.

The analyses return data (analyzers.findings, analyzers.syncs.blocking); only this module turns them into
text, so JSON output stays the data itself.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
from rich.table import Table

from analyzers.findings.finding import Finding, Severity, sort_findings
from viz.tables import syncs_summary

SEVERITY_STYLE = {Severity.critical: "bold red", Severity.warning: "yellow", Severity.info: "cyan"}
SYNC_GROUP_LIMIT = 20  # rows of the grouped sync table; the JSON output has every sync
PER_FINDING_ROWS = 3  # past this many findings of one id (one per rank at scale), the rest in one row
RANK_TOTALS_LIMIT = 16  # per-rank sync totals in the caption up to this many ranks


def collapse(findings: list[Finding]) -> tuple[list[Finding], dict[int, tuple[int, list[int]]]]:
    """The findings to list, most severe first, at most PER_FINDING_ROWS of each id; for the last one
    listed of an id that had more: (how many more, the ranks they name)."""
    shown: list[Finding] = []
    more: dict[int, tuple[int, list[int]]] = {}
    by_id: dict[str, list[Finding]] = {}
    for f in sort_findings(findings):
        by_id.setdefault(f.id, []).append(f)
    seen: dict[str, int] = {}
    for f in sort_findings(findings):
        k = seen.get(f.id, 0)
        seen[f.id] = k + 1
        if k < PER_FINDING_ROWS:
            shown.append(f)
            rest = by_id[f.id][PER_FINDING_ROWS:]
            if k == PER_FINDING_ROWS - 1 and rest:
                more[len(shown) - 1] = (len(rest), sorted({r for g in rest for r in g.ranks}))
    return shown, more


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks)) if ranks else "-"


def _ms(ns: float | int) -> str:
    return f"{ns / 1e6:.3f}"


def findings_table(findings: list[Finding], title: str = "findings") -> Table:
    """One row per finding, most severe first: severity, id, ranks, what was found, the fix."""
    table = Table(title=title, title_justify="left", header_style="bold", show_lines=True)
    table.add_column("severity", no_wrap=True)
    table.add_column("finding", no_wrap=True)
    table.add_column("ranks", justify="right")
    table.add_column("what")
    table.add_column("fix")
    if not findings:
        table.add_row("", "none", "", "no cause of lost overlap found", "")
        return table
    from analyzers.io.rank_select import format_ranks

    shown, more = collapse(findings)
    for i, f in enumerate(shown):
        style = SEVERITY_STYLE.get(f.severity, "")
        sev = f"[{style}]{f.severity}[/{style}]" if style else str(f.severity)
        table.add_row(sev, f.id, _ranks(f.ranks), f.title, f.fix)
        if i in more:
            n, ranks = more[i]
            table.add_row("", f.id, "…", f"and {n} more {f.id} findings (ranks {format_ranks(ranks, 8)}); "
                                         "-f json lists every one", "")
    return table


def syncs_table(df: pd.DataFrame, title: str = "blocking host syncs", limit: int = SYNC_GROUP_LIMIT) -> Table:
    """Blocking syncs per rank, API and caller (analyzers.syncs.blocking.blocking_syncs rows, any ranks)."""
    table = Table(title=title, title_justify="left", header_style="bold")
    for name in ("rank", "api", "caller", "syncs", "host blocked ms", "GPU idle ms", "idle median µs", "steps"):
        table.add_column(name, justify="left" if name in ("api", "caller") else "right")
    summary = syncs_summary(df)
    if summary.empty:
        table.add_row("", "none", "", "0", "", "", "", "")
        return table
    for r in summary.head(limit).itertuples(index=False):
        table.add_row(str(r.rank), r.api, str(r.caller)[:60], str(r.n), _ms(r.host_blocked_ns), _ms(r.gpu_idle_ns),
                      f"{r.gpu_idle_ns_median / 1e3:.1f}", str(r.steps))
    if len(summary) > limit:
        table.caption = f"{len(summary) - limit} more groups; --format json lists every sync"
    totals = df.groupby("rank").agg(n=("start_ns", "size"), idle=("gpu_idle_ns", "sum"),
                                    host=("host_blocked_ns", "sum"))
    if len(totals) > RANK_TOTALS_LIMIT:  # the ranks whose syncs idled the GPU most
        head = f"{len(totals)} ranks with blocking syncs; the {RANK_TOTALS_LIMIT} with the most GPU idle"
        totals = totals.sort_values("idle", ascending=False, kind="stable").head(RANK_TOTALS_LIMIT)
        table.caption = ((table.caption + "; ") if table.caption else "") + head
    table.caption = ((table.caption + "; ") if table.caption else "") + "; ".join(
        f"rank {rk}: {int(r.n)} syncs, host blocked {_ms(r.host)} ms, GPU idle {_ms(r.idle)} ms"
        for rk, r in totals.iterrows())
    return table


def _evidence_value(v: Any) -> str:
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 1e15 else f"{v:.4g}"
    if isinstance(v, (list, dict)):
        text = json.dumps(v, ensure_ascii=False)
        return text if len(text) <= 300 else text[:297] + "..."
    return str(v)


def findings_markdown(findings: list[Finding], heading_level: int = 3) -> str:
    """Each finding as a Markdown section: title, explanation, evidence figures, fix."""
    if not findings:
        return "No cause of lost overlap found.\n"
    from analyzers.io.rank_select import format_ranks

    h = "#" * heading_level
    parts = []
    shown, more = collapse(findings)
    for i, f in enumerate(shown):
        lines = [f"{h} {f.severity}: `{f.id}` — {f.title}", "", f.explanation, ""]
        if f.start_ns is not None and f.end_ns is not None:
            lines.append(f"- time range: {f.start_ns} – {f.end_ns} ns (ranks {_ranks(f.ranks)})")
        for k, v in f.evidence.items():
            lines.append(f"- {k}: `{_evidence_value(v)}`")
        lines += ["", f"**Fix:** {f.fix}", ""]
        if i in more:
            n, ranks = more[i]
            lines += [f"… and {n} more `{f.id}` findings (ranks {format_ranks(ranks, 8)}); `-f json` lists every one.",
                      ""]
        parts.append("\n".join(lines))
    return "\n".join(parts)
