"""Trace diff between schedule variants: what a schedule change did, in numbers.

People move a sync, add a stream or reorder collectives and then compare two profiler
screenshots by eye. ``diff_reports`` puts every metric of two analyzed trace sets side by
side with absolute and relative deltas, per rank and aggregated; compares iteration-time
distributions; lists findings present on one side only; compares kernels by normalized
name (analyzers.timeline.kernel_names) so compiler-chosen name parts do not show up as changes;
notes where the two runs differ in structure (ranks, GPUs, iterations); and ends in one
verdict line. ``aligned_timelines`` gives both sets' GPU intervals on a common time axis
(an iteration start), for drawing A over B; ``compare_many`` is the n-variant table that
``overlapscope sweep`` prints.

All metric definitions come from analyzers.overlap.metrics; nothing here redefines them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analyzers.diff.collectives import collective_deltas
from analyzers.diff.rank_metrics import (
    _aggregate_values,
    _ranges,
    _rank_deltas,
    _rank_frame,
    _side_by_side,
    iteration_stats,
    iteration_table,
    pair_ranks,
)
from analyzers.diff.result import BLOCKING_SYNC_PATHS, PEER_WAIT_PATHS, TraceDiff
from analyzers.diff.sections import (
    _section,
    diff_findings,
    harmful_syncs,
    kernel_deltas,
    kernel_stats,
    section_total,
)
from analyzers.diff.timelines import aligned_timelines, alignment_step
from analyzers.diff.verdict import structure_notes, verdict
from analyzers.overlap.metrics import AnalysisOptions
from analyzers.report import AnalysisReport
from analyzers.timeline.model import TraceSet

# ---------------------------------------------------------------- the diff

def diff_reports(a: AnalysisReport, b: AnalysisReport, traces_a: TraceSet, traces_b: TraceSet,
                 labels: tuple[str, str] = ("A", "B"), *, options: AnalysisOptions | None = None,
                 kernel_names: str = "normalized") -> TraceDiff:
    """Everything that differs between two analyzed trace sets (see module docstring).

    options: the AnalysisOptions both reports were made with (kernel tables then cover the
    same rows as the metrics). kernel_names: "normalized" | "coarse" | "raw".
    """
    options = options or AnalysisOptions()
    pairs, notes = pair_ranks([m.rank for m in a.ranks], [m.rank for m in b.ranks])
    fa, fb = _rank_frame(a), _rank_frame(b)
    ranks = _rank_deltas(fa, fb, pairs)

    per_rank_mean = len(a.ranks) != len(b.ranks)
    ia, ib = iteration_stats(a), iteration_stats(b)
    va, vb = _aggregate_values(fa, per_rank_mean), _aggregate_values(fb, per_rank_mean)
    for key in ("iteration_ns_median", "iteration_ns_worst", "spread_ns", "exposed_comm_ns_per_step_median"):
        va[key], vb[key] = ia.get(key, np.nan), ib.get(key, np.nan)
    not_analyzed = []
    for name, keys, metric in (("cross_rank", PEER_WAIT_PATHS, "peer_wait_ns"),
                               ("syncs", BLOCKING_SYNC_PATHS, "blocking_sync_ns")):
        sa, sb = _section(a, name), _section(b, name)
        if name == "syncs":  # only the syncs that left the GPU idle; and the idle they caused, where known
            sa, sb = harmful_syncs(sa), harmful_syncs(sb)
            idle = [section_total(x, (("*", "gpu_idle_ns"),)) for x in (sa, sb)]
        xa, xb = section_total(sa, keys), section_total(sb, keys)
        if xa is None and xb is None:
            not_analyzed.append(metric)
            if metric == "peer_wait_ns" and min(len(a.ranks), len(b.ranks)) < 2:
                notes.append("peer wait needs two or more ranks on each side")
            continue
        va[metric] = np.nan if xa is None else xa
        vb[metric] = np.nan if xb is None else xb
        if name == "syncs" and any(x is not None for x in idle):
            va["sync_gpu_idle_ns"], vb["sync_gpu_idle_ns"] = (np.nan if x is None else x for x in idle)
    va, vb = va.astype(float), vb.astype(float)
    aggregate = _side_by_side(va, vb).reset_index(names="metric")

    kernels = kernel_deltas(kernel_stats(traces_a, a, options, kernel_names),
                            kernel_stats(traces_b, b, options, kernel_names))
    findings = diff_findings(a, b, pairs)
    if findings["status"] == "not analyzed":
        not_analyzed.append("findings")

    structure = structure_notes(a, b, traces_a, traces_b, ia, ib)
    notes = notes + [n for n, _ in structure]
    only = kernels["presence"].value_counts()
    if only.get("only A", 0) or only.get("only B", 0):
        notes.append(f"kernel names ({kernel_names}): {only.get('only A', 0)} only in A, "
                     f"{only.get('only B', 0)} only in B, {only.get('both', 0)} in both")
    notes += _report_notes(labels[0], a) + _report_notes(labels[1], b)
    alignment = alignment_step(traces_a, traces_b, None, options.step_pattern)

    identical = (
        len(a.ranks) == len(b.ranks) and all(x == y for x, y in pairs)
        and _same(ranks["a"], ranks["b"]) and _same(aggregate["a"], aggregate["b"])
        and _same(kernels[["count_a", "total_ns_a"]], kernels[["count_b", "total_ns_b"]])
        and ia.get("durations_ns") == ib.get("durations_ns") and ia.get("steps") == ib.get("steps")
        and not findings["only_a"] and not findings["only_b"] and not findings["ranks_differ"] and not structure
    )
    line = verdict(labels, aggregate, ia, ib, identical, different_jobs=any(job for _, job in structure))
    return TraceDiff(
        labels=labels, sources=(a.sources, b.sources), rank_pairs=pairs, ranks=ranks,
        aggregation="mean per rank" if per_rank_mean else "sum over ranks", aggregate=aggregate,
        iterations={labels[0]: ia, labels[1]: ib}, kernels=kernels, kernel_names=kernel_names,
        findings=findings, not_analyzed=not_analyzed, alignment=alignment, notes=notes, verdict=line,
        identical=identical, collectives=collective_deltas(a.collectives, b.collectives),
    )


def _report_notes(label: str, report: AnalysisReport) -> list[str]:
    """A report's own notes, then its rank notes with the ranks that share each one."""
    by_note: dict[str, list[int]] = {}
    for m in report.ranks:
        for n in dict.fromkeys(m.notes):
            by_note.setdefault(n, []).append(m.rank)
    return [f"{label}: {n}" for n in report.notes] + \
        [f"{label} rank{'s' if len(r) > 1 else ''} {_ranges(sorted(r))}: {n}" for n, r in by_note.items()]


def _same(a: Any, b: Any) -> bool:
    """Equal everywhere, undefined (NaN: a ratio without denominator) counting as equal only to undefined."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return bool(np.all((x == y) | (np.isnan(x) & np.isnan(y))))


# ---------------------------------------------------------------- n variants (overlapscope sweep)

SWEEP_COLUMNS = ("overlap_ratio", "overlap_ratio_rank_median", "overlap_ratio_rank_min", "hidden_fraction_of_min",
                 "comm_ns", "compute_ns",
                 "overlap_ns", "exposed_comm_ns", "span_ns", "idle_ns", "compute_compute_overlap_ns",
                 "iteration_ns_median", "iteration_ns_worst", "spread_ns")


def compare_many(reports: dict[str, AnalysisReport], baseline: str) -> pd.DataFrame:
    """One row per variant: every aggregated metric, iteration time and the change over the
    baseline (overlap in points, speed-up = baseline iteration time / variant's, >1 is faster).

    Times are summed over ranks when every variant has the same rank count, else averaged
    per rank (column ``aggregation`` says which).
    """
    if baseline not in reports:
        raise KeyError(f"baseline {baseline!r} is not one of {', '.join(reports)}")
    per_rank_mean = len({len(r.ranks) for r in reports.values()}) > 1
    rows = []
    for name, rep in reports.items():
        v = _aggregate_values(_rank_frame(rep), per_rank_mean)
        st = iteration_stats(rep)
        rows.append({"variant": name, "ranks": len(rep.ranks), "iterations": st["n"],
                     **{k: v.get(k, st.get(k, np.nan)) for k in SWEEP_COLUMNS}})
    df = pd.DataFrame(rows)
    for k in SWEEP_COLUMNS:
        df[k] = df[k].astype(float)
    base = df.loc[df["variant"] == baseline].iloc[0]
    time_col = "iteration_ns_median" if df["iteration_ns_median"].notna().all() else "span_ns"
    df["overlap_points_vs_baseline"] = 100 * (df["overlap_ratio"] - base["overlap_ratio"])
    df["speedup_vs_baseline"] = base[time_col] / df[time_col].where(df[time_col] > 0)
    df["time_vs_baseline"] = (df[time_col] - base[time_col]) / base[time_col] if base[time_col] > 0 else np.nan
    df["speed_basis"] = time_col
    df["aggregation"] = "mean per rank" if per_rank_mean else "sum over ranks"
    df["is_baseline"] = df["variant"] == baseline
    return df


__all__ = ["TraceDiff", "diff_reports", "aligned_timelines", "alignment_step", "compare_many",
           "kernel_stats", "kernel_deltas", "iteration_stats", "iteration_table", "pair_ranks"]
