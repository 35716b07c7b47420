"""Rendering of findings and blocking host syncs: rich tables for the terminal, Markdown for reports.

Both read the analysis document (the JSON `analyze -f json` prints): its ``findings`` list and its
``syncs.per_rank`` rows. Plain Python, no pandas: a report-cache hit renders without the analysis stack.
"""

from __future__ import annotations

import json
from typing import Any

from rich.table import Table

from viz.critical import saving_text
from viz.tables import Doc, syncs_summary

# Severity order as analyzers.findings.finding.SEVERITY_ORDER has it (importing that package loads the
# detectors and pandas; tests/test_findings.py checks the two agree).
SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}
SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
SYNC_GROUP_LIMIT = 20  # rows of the grouped sync table; the JSON output has every sync


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks)) if ranks else "-"


def _ms(ns: float | int) -> str:
    return f"{ns / 1e6:.3f}"


def sort_findings(findings: list[Doc]) -> list[Doc]:
    """Largest saving first (priced before unpriced), then most severe, by id and first rank, so output
    is stable (as analyzers' sort_findings)."""
    return sorted(findings, key=lambda f: (f.get("saving_ns") is None, -(f.get("saving_ns") or 0),
                                           -SEVERITY_RANK[f["severity"]], f["id"], f["ranks"][:1],
                                           f.get("start_ns") or 0))


def findings_table(findings: list[Doc], title: str = "findings") -> Table:
    """One row per finding, largest saving first: severity, id, ranks, saving per step, what was found, the fix."""
    table = Table(title=title, title_justify="left", header_style="bold", show_lines=True)
    table.add_column("severity", no_wrap=True)
    table.add_column("finding", no_wrap=True)
    table.add_column("ranks", justify="right")
    table.add_column("saves / step", justify="right")
    table.add_column("what")
    table.add_column("fix")
    if not findings:
        table.add_row("", "none", "", "", "no cause of lost overlap found", "")
        return table
    for f in sort_findings(findings):
        style = SEVERITY_STYLE.get(f["severity"], "")
        sev = f"[{style}]{f['severity']}[/{style}]" if style else str(f["severity"])
        saving = f.get("saving_ns")
        saves = "" if saving is None else f"{_ms(saving)} ms\n{100 * (f.get('saving_fraction') or 0):.1f}%"
        table.add_row(sev, f["id"], _ranks(f["ranks"]), saves, f["title"], f["fix"])
    return table


def syncs_table(rows: list[Doc], title: str = "blocking host syncs", limit: int = SYNC_GROUP_LIMIT) -> Table:
    """Blocking syncs per rank, API and caller (the document's sync rows, any ranks)."""
    table = Table(title=title, title_justify="left", header_style="bold")
    for name in ("rank", "api", "caller", "syncs", "host blocked ms", "GPU idle ms", "idle median µs", "steps"):
        table.add_column(name, justify="left" if name in ("api", "caller") else "right")
    summary = syncs_summary(rows)
    if not summary:
        table.add_row("", "none", "", "0", "", "", "", "")
        return table
    for g in summary[:limit]:
        median = g["gpu_idle_ns_median"]
        table.add_row(str(g["rank"]), g["api"], str(g["caller"])[:60], str(g["n"]), _ms(g["host_blocked_ns"]),
                      _ms(g["gpu_idle_ns"]), "n/a" if median is None else f"{median / 1e3:.1f}", str(g["steps"]))
    if len(summary) > limit:
        table.caption = f"{len(summary) - limit} more groups; --format json lists every sync"
    totals: dict[Any, list[float]] = {}
    for row in rows:
        t = totals.setdefault(row["rank"], [0, 0, 0])
        t[0] += 1
        t[1] += row["gpu_idle_ns"] or 0
        t[2] += row["host_blocked_ns"] or 0
    table.caption = ((table.caption + "; ") if table.caption else "") + "; ".join(
        f"rank {rk}: {n} syncs, host blocked {_ms(host)} ms, GPU idle {_ms(idle)} ms"
        for rk, (n, idle, host) in sorted(totals.items()))
    return table


def _evidence_value(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 1e15 else f"{v:.4g}"
    if isinstance(v, (list, dict)):
        text = json.dumps(v, ensure_ascii=False)
        return text if len(text) <= 300 else text[:297] + "..."
    return str(v)


def findings_markdown(findings: list[Doc], heading_level: int = 3) -> str:
    """Each finding as a Markdown section: title, explanation, evidence figures, fix."""
    if not findings:
        return "No cause of lost overlap found.\n"
    h = "#" * heading_level
    parts = []
    for f in sort_findings(findings):
        lines = [f"{h} {f['severity']}: `{f['id']}` — {f['title']}", "", f["explanation"], ""]
        if f.get("start_ns") is not None and f.get("end_ns") is not None:
            lines.append(f"- time range: {f['start_ns']} – {f['end_ns']} ns (ranks {_ranks(f['ranks'])})")
        for k, v in f["evidence"].items():
            lines.append(f"- {k}: `{_evidence_value(v)}`")
        priced = saving_text(f.get("saving_ns"), f.get("saving_fraction"))
        lines += ["", f"**Fix:** {f['fix']}" + (f" — {priced}" if priced else ""), ""]
        parts.append("\n".join(lines))
    return "\n".join(parts)
