"""Rows of a report's tables as text: the metrics per rank and the grouped blocking host syncs.

Built once here and drawn by each front end: rich tables and Markdown in the CLI
(overlapscope/render*.py), HTML in the shareable report (viz/export_html.py).
"""

from __future__ import annotations

import pandas as pd

from analyzers.report import AnalysisReport

from .formats import UNDEFINED, ms, pct

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


def rank_rows(report: AnalysisReport) -> list[list[str]]:
    """One row per rank; past scale_tables.MAX_RANK_ROWS ranks, the distribution across ranks and the
    ranks with the lowest overlap ratio (the JSON and `--tables` keep every rank)."""
    from .scale_tables import TOP_RANKS, distribution_rows, many

    if many(len(report.ranks)):
        ms_ = [lambda v: ms(int(v))] * 3
        cols = [[m.whole.comm_ns for m in report.ranks], [m.whole.compute_ns for m in report.ranks],
                [m.whole.overlap_ns for m in report.ranks], [m.whole.overlap_ratio for m in report.ranks],
                [m.whole.exposed_comm_ns for m in report.ranks], [m.whole.hidden_fraction_of_min for m in report.ranks],
                [m.whole.span_ns for m in report.ranks], [m.whole.idle_ns for m in report.ranks],
                [m.iteration_summary.get("n", 0) for m in report.ranks]]
        fmts = [*ms_, pct, lambda v: ms(int(v)), pct, lambda v: ms(int(v)), lambda v: ms(int(v)),
                lambda v: str(int(v))]
        rows = [[*r, UNDEFINED] for r in distribution_rows(cols, fmts)]
        worst = sorted((m for m in report.ranks if m.overlap_ratio is not None), key=lambda m: m.overlap_ratio)
        picked = {m.rank for m in worst[:TOP_RANKS]}
        return rows + [[f"{r[0]} (lowest overlap)", *r[1:]] for r in _rows(report, picked)]
    return _rows(report, None)


def _rows(report: AnalysisReport, only: set[int] | None) -> list[list[str]]:
    rows = []
    ordered = sorted(report.ranks, key=lambda m: (m.overlap_ratio is None, m.overlap_ratio or 0.0))
    for m in ordered if only is not None else report.ranks:
        if only is not None and m.rank not in only:
            continue
        w, s = m.whole, m.iteration_summary
        iters = (f"{pct(s.get('overlap_ratio_median'))}/{pct(s.get('overlap_ratio_worst'))}"
                 if s.get("n") else UNDEFINED)
        rows.append([
            str(m.rank), ms(w.comm_ns), ms(w.compute_ns), ms(w.overlap_ns), pct(w.overlap_ratio),
            ms(w.exposed_comm_ns), pct(w.hidden_fraction_of_min), ms(w.span_ns), ms(w.idle_ns),
            str(s.get("n", 0)), iters,
        ])
    return rows


def syncs_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Blocking syncs grouped by rank, API and caller: count, host blocked, GPU idle (ns)."""
    cols = ["rank", "api", "caller", "n", "host_blocked_ns", "gpu_idle_ns", "gpu_idle_ns_median", "steps"]
    if df.empty:
        return pd.DataFrame({c: [] for c in cols})
    who = df["sync_op"].where(df["sync_op"] != "", df["caller"])
    who = who.where(who != "", df["annotation"]).where(lambda x: x != "", df["frame"])
    g = df.assign(who=who.replace("", "-")).groupby(["rank", "api", "who"], sort=False)
    out = g.agg(n=("start_ns", "size"), host_blocked_ns=("host_blocked_ns", "sum"),
                gpu_idle_ns=("gpu_idle_ns", "sum"), gpu_idle_ns_median=("gpu_idle_ns", "median"),
                steps=("step", lambda s: int((s[s >= 0]).nunique()))).reset_index().rename(columns={"who": "caller"})
    return out.sort_values(["rank", "gpu_idle_ns"], ascending=[True, False], kind="stable")[cols].reset_index(drop=True)
