"""Rendering of findings and blocking host syncs: rich tables for the terminal, Markdown for reports.

Both read the analysis document (the JSON `analyze -f json` prints): its ``findings`` list and its
``syncs.per_rank`` rows. Plain Python, no pandas: a report-cache hit renders without the analysis stack.
"""

from __future__ import annotations

import json
from typing import Any

from rich.table import Table

from viz.critical import saving_text
from viz.safe_text import markdown_code, markdown_text, terminal_text
from viz.tables import Doc

# Severity order as analyzers.findings.finding.SEVERITY_ORDER has it (importing that package loads the
# detectors and pandas; tests/test_findings.py checks the two agree).
SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}
SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
SYNC_GROUP_LIMIT = 20  # rows of the grouped sync table; `analyze --tables` has every sync
PER_FINDING_ROWS = 3  # past this many findings of one id (one per rank at scale), the rest in one row
RANK_TOTALS_LIMIT = 16  # per-rank sync totals in the caption up to this many ranks


def collapse(findings: list[Doc]) -> tuple[list[Doc], dict[int, tuple[int, list[int]]]]:
    """The findings to list, most severe first, at most PER_FINDING_ROWS of each id; for the last one
    listed of an id that had more: (how many more, the ranks they name)."""
    ordered = sort_findings(findings)
    by_id: dict[str, list[Doc]] = {}
    for f in ordered:
        by_id.setdefault(f["id"], []).append(f)
    shown: list[Doc] = []
    more: dict[int, tuple[int, list[int]]] = {}
    seen: dict[str, int] = {}
    for f in ordered:
        k = seen[f["id"]] = seen.get(f["id"], 0) + 1
        if k <= PER_FINDING_ROWS:
            shown.append(f)
            rest = by_id[f["id"]][PER_FINDING_ROWS:]
            if k == PER_FINDING_ROWS and rest:
                more[len(shown) - 1] = (len(rest), sorted({r for g in rest for r in g["ranks"]}))
    return shown, more


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
    from analyzers.io.rank_select import format_ranks

    shown, more = collapse(findings)
    for i, f in enumerate(shown):
        style = SEVERITY_STYLE.get(f["severity"], "")
        sev = f"[{style}]{f['severity']}[/{style}]" if style else terminal_text(f["severity"])
        saves = _saves(f.get("saving_ns"), f.get("saving_fraction"))
        table.add_row(sev, *(terminal_text(c) for c in (f["id"], _ranks(f["ranks"]), saves, f["title"], f["fix"])))
        if i in more:
            n, ranks = more[i]
            table.add_row("", terminal_text(f["id"]), "…", "", terminal_text(
                f"and {n} more {f['id']} findings (ranks {format_ranks(ranks, 8)}); -f json lists every one"), "")
    return table


def _saves(saving: int | None, fraction: float | None) -> str:
    """The saving cell: blank when not priced; "none" when the replay with the fix is no faster (its longer step
    shown, as the JSON's negative saving_ns keeps it), as the app's and Markdown's "saves nothing" say."""
    if saving is None:
        return ""
    if saving <= 0:
        return "none" if saving == 0 else f"none\nreplay +{_ms(-saving)} ms"
    return f"{_ms(saving)} ms\n{100 * (fraction or 0):.1f}%"


def syncs_table(syncs: Doc, title: str = "blocking host syncs", limit: int = SYNC_GROUP_LIMIT) -> Table:
    """Blocking syncs per rank, API and caller (the document's `syncs` section, any ranks)."""
    table = Table(title=title, title_justify="left", header_style="bold")
    for name in ("rank", "api", "caller", "syncs", "host blocked ms", "GPU idle ms", "idle median µs", "steps"):
        table.add_column(name, justify="left" if name in ("api", "caller") else "right")
    summary = syncs.get("groups") or []
    if not summary:
        table.add_row("", "none", "", "0", "", "", "", "")
        return table
    for g in summary[:limit]:
        median = g["gpu_idle_ns_median"]
        table.add_row(*(terminal_text(c) for c in (
            g["rank"], g["api"], str(g["caller"])[:60], g["n"], _ms(g["host_blocked_ns"]), _ms(g["gpu_idle_ns"]),
            "n/a" if median is None else f"{median / 1e3:.1f}", g["steps"])))
    n_groups = syncs.get("n_groups", len(summary))
    if n_groups > min(limit, len(summary)):
        table.caption = (f"{n_groups - min(limit, len(summary))} more groups; `analyze --tables DIR` lists every "
                         "sync (syncs.parquet)")
    listed = sorted((int(r), d) for r, d in (syncs.get("per_rank") or {}).items() if d["n"])
    if len(listed) > RANK_TOTALS_LIMIT:  # the ranks whose syncs idled the GPU most
        table.caption = ((table.caption + "; ") if table.caption else "") + (
            f"{len(listed)} ranks with blocking syncs; the {RANK_TOTALS_LIMIT} with the most GPU idle")
        listed = sorted(listed, key=lambda kv: -kv[1]["gpu_idle_ns"])[:RANK_TOTALS_LIMIT]
    table.caption = ((table.caption + "; ") if table.caption else "") + "; ".join(
        f"rank {terminal_text(rk)}: {d['n']} syncs, host blocked {_ms(d['host_blocked_ns'])} ms, "
        f"GPU idle {_ms(d['gpu_idle_ns'])} ms"
        for rk, d in listed)
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
    from analyzers.io.rank_select import format_ranks

    h = "#" * heading_level
    parts = []
    shown, more = collapse(findings)
    for i, f in enumerate(shown):
        md = markdown_text  # every text of a finding may hold a kernel, stream or file name
        lines = [f"{h} {md(f['severity'])}: {md(f['id'])} — {md(f['title'])}", "", md(f["explanation"]), ""]
        if f.get("start_ns") is not None and f.get("end_ns") is not None:
            lines.append(f"- time range: {md(f['start_ns'])} – {md(f['end_ns'])} ns (ranks {md(_ranks(f['ranks']))})")
        for k, v in f["evidence"].items():
            lines.append(f"- {md(k)}: {markdown_code(_evidence_value(v))}")
        priced = saving_text(f.get("saving_ns"), f.get("saving_fraction"))
        lines += ["", f"**Fix:** {md(f['fix'])}" + (f" — {md(priced)}" if priced else ""), ""]
        if i in more:
            n, ranks = more[i]
            lines += [f"… and {n} more {md(f['id'])} findings (ranks {md(format_ranks(ranks, 8))}); `-f json` lists "
                      "every one.", ""]
        parts.append("\n".join(lines))
    return "\n".join(parts)
