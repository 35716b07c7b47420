"""Rows of a report's tables as text: the metrics per rank and the grouped blocking host syncs.

Built once here from the analysis document (the JSON `analyze -f json` prints, decoded) and drawn by
each front end: rich tables and Markdown in the CLI (overlapscope/render*.py), HTML in the shareable
report (viz/export_html.py). Plain Python over dicts, no pandas: the CLI draws a cached document
without loading the analysis stack.
"""

from __future__ import annotations

import statistics
from typing import Any

from .formats import UNDEFINED, ms, pct

Doc = dict[str, Any]

RANK_COLUMNS: list[tuple[str, str]] = [
    ("rank", "rank"),
    ("comm ms", "comm"),
    ("compute ms", "compute"),
    ("overlap ms", "overlap"),
    ("overlap", "ratio"),
    ("exposed ms", "exposed"),
    ("hidden/min", "hidden"),
    ("span ms", "span"),
    ("idle ms", "idle"),
    ("steps", "steps"),
    ("step median/worst", "iters"),
]


def rank_rows(doc: Doc) -> list[list[str]]:
    """One text row per rank of the document's ``ranks`` (RANK_COLUMNS); past scale_tables.MAX_RANK_ROWS
    ranks, the distribution across ranks and the ranks with the lowest overlap ratio (the JSON and
    `analyze --tables` keep every rank)."""
    from .scale_tables import TOP_RANKS, distribution_rows, many

    ranks = doc["ranks"]
    if not many(len(ranks)):
        return _rows(ranks)
    keys = ("comm_ns", "compute_ns", "overlap_ns", "overlap_ratio", "exposed_comm_ns", "hidden_fraction_of_min",
            "span_ns", "idle_ns")
    fmts = [pct if k in ("overlap_ratio", "hidden_fraction_of_min") else (lambda v: ms(int(v))) for k in keys]
    cols = [[m[k] for m in ranks] for k in keys] + [[m["iteration_summary"].get("n", 0) for m in ranks]]
    rows = [[*r, UNDEFINED] for r in distribution_rows(cols, [*fmts, lambda v: str(int(v))])]
    worst = sorted((m for m in ranks if m["overlap_ratio"] is not None), key=lambda m: m["overlap_ratio"])
    return rows + [[f"{r[0]} (lowest overlap)", *r[1:]] for r in _rows(worst[:TOP_RANKS])]


def _rows(ranks: list[Doc]) -> list[list[str]]:
    rows = []
    for m in ranks:
        s = m["iteration_summary"]
        iters = (f"{pct(s.get('overlap_ratio_median'))}/{pct(s.get('overlap_ratio_worst'))}"
                 if s.get("n") else UNDEFINED)
        rows.append([
            str(m["rank"]), ms(m["comm_ns"]), ms(m["compute_ns"]), ms(m["overlap_ns"]), pct(m["overlap_ratio"]),
            ms(m["exposed_comm_ns"]), pct(m["hidden_fraction_of_min"]), ms(m["span_ns"]), ms(m["idle_ns"]),
            str(s.get("n", 0)), iters,
        ])
    return rows


def sync_rows(doc: Doc) -> list[Doc]:
    """Every blocking sync of the document, rank after rank (its ``syncs.per_rank`` rows)."""
    syncs = doc.get("syncs") or {}
    return [row for rows in (syncs.get("per_rank") or {}).values() for row in rows]


def _who(row: Doc) -> str:
    """What a sync is filed under: the sync-implying op, else its caller, annotation or frame."""
    for key in ("sync_op", "caller", "annotation", "frame"):
        if row.get(key):
            return row[key]
    return "-"


def syncs_summary(rows: list[Doc]) -> list[Doc]:
    """Blocking syncs grouped by rank, API and caller (in order of appearance): count, host blocked and
    GPU idle (ns), the GPU idle median and the steps they fell in; by rank, most GPU idle first."""
    groups: dict[tuple[Any, str, str], list[Doc]] = {}
    for row in rows:
        groups.setdefault((row["rank"], row["api"], _who(row)), []).append(row)
    out = []
    for (rank, api, who), members in groups.items():
        idle = [m["gpu_idle_ns"] for m in members if m["gpu_idle_ns"] is not None]
        out.append({"rank": rank, "api": api, "caller": who, "n": len(members),
                    "host_blocked_ns": sum(m["host_blocked_ns"] or 0 for m in members),
                    "gpu_idle_ns": sum(idle), "gpu_idle_ns_median": statistics.median(idle) if idle else None,
                    "steps": len({m["step"] for m in members if m["step"] is not None and m["step"] >= 0})})
    return sorted(out, key=lambda g: (g["rank"], -g["gpu_idle_ns"]))
