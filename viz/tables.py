"""Rows of a report's tables as text: the metrics per rank and the grouped blocking host syncs.

Built once here from the analysis document (the JSON `analyze -f json` prints, decoded) and drawn by
each front end: rich tables and Markdown in the CLI (overlapscope/render*.py), HTML in the shareable
report (viz/export_html.py). Plain Python over dicts, no pandas: the CLI draws a cached document
without loading the analysis stack.
"""

from __future__ import annotations

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


def sync_section(doc: Doc) -> Doc:
    """The document's blocking syncs (analyzers.syncs.summary.syncs_document): totals per rank, the groups
    by rank, API and caller (most GPU idle first within a rank, capped, with n_groups), the top syncs;
    empty where the document has none."""
    return doc.get("syncs") or {}
