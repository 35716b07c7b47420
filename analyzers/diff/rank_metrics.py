"""Per-rank and aggregated metrics side by side with deltas, rank pairing, iteration statistics."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analyzers.diff.result import COUNT_METRICS, ITERATION_METRICS, RANK_METRICS, RATIO_METRICS, TIME_METRICS
from analyzers.report import AnalysisReport

# ---------------------------------------------------------------- per-rank and aggregated metrics

def _rank_frame(report: AnalysisReport) -> pd.DataFrame:
    """One row per rank, one column per compared metric (NaN where undefined)."""
    rows = []
    for m in report.ranks:
        s = m.iteration_summary
        rows.append({"rank": m.rank, **{k: getattr(m.whole, k) for k in RATIO_METRICS + TIME_METRICS + COUNT_METRICS},
                     **{k: s.get(k) for k in ITERATION_METRICS}})
    df = pd.DataFrame(rows, columns=["rank", *RANK_METRICS])
    return df.set_index("rank")[list(RANK_METRICS)].astype(float)


def pair_ranks(ids_a: list[int], ids_b: list[int]) -> tuple[list[tuple[int, int]], list[str]]:
    """Which rank of A is compared with which rank of B, and a note when that is not obvious.

    Same ranks on both sides pair by id; partly shared ranks pair the shared ones; disjoint
    rank sets (two different jobs, or one rank picked from each) pair in order.
    """
    common = sorted(set(ids_a) & set(ids_b))
    notes: list[str] = []
    if set(ids_a) == set(ids_b):
        return [(r, r) for r in common], notes
    if common:
        only_a, only_b = sorted(set(ids_a) - set(ids_b)), sorted(set(ids_b) - set(ids_a))
        notes.append(f"ranks differ: compared ranks {_ranges(common)}; only in A: {_ranges(only_a) or 'none'}; "
                     f"only in B: {_ranges(only_b) or 'none'}")
        return [(r, r) for r in common], notes
    pairs = list(zip(sorted(ids_a), sorted(ids_b), strict=False))
    notes.append(f"ranks differ (A has {_ranges(sorted(ids_a))}, B has {_ranges(sorted(ids_b))}): "
                 f"compared in order ({', '.join(f'{a}↔{b}' for a, b in pairs)})")
    return pairs, notes


def _ranges(ids: list[int]) -> str:
    """[0,1,2,5] -> '0-2, 5'."""
    if not ids:
        return ""
    out, start, prev = [], ids[0], ids[0]
    for x in [*ids[1:], None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if x is not None:
            start = prev = x
    return ", ".join(out)


def _side_by_side(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """a, b: same shape, numeric -> a, b, delta = b - a, rel = delta / |a| (NaN when a is 0 or undefined)."""
    delta = b - a
    rel = delta / a.abs().where(a != 0)
    rel = rel.where(~((delta == 0) & a.notna()), 0.0)  # 0 -> 0 is no change, not undefined
    return pd.DataFrame({"a": a, "b": b, "delta": delta, "rel": rel})


def _rank_deltas(fa: pd.DataFrame, fb: pd.DataFrame, pairs: list[tuple[int, int]]) -> pd.DataFrame:
    """Long table: rank_a, rank_b, metric, a, b, delta, rel (vectorized over ranks x metrics)."""
    cols = ["rank_a", "rank_b", "metric", "a", "b", "delta", "rel"]
    if not pairs:
        return pd.DataFrame({c: [] for c in cols})
    ia, ib = [p[0] for p in pairs], [p[1] for p in pairs]
    a = fa.loc[ia].reset_index(drop=True)
    b = fb.loc[ib].reset_index(drop=True)
    la = a.stack(future_stack=True)
    lb = b.stack(future_stack=True)
    out = _side_by_side(la, lb).reset_index(names=["pair", "metric"])
    out.insert(0, "rank_b", np.asarray(ib)[out["pair"].to_numpy()])
    out.insert(0, "rank_a", np.asarray(ia)[out["pair"].to_numpy()])
    return out[cols]


def _aggregate_values(frame: pd.DataFrame, per_rank_mean: bool) -> pd.Series:
    """Aggregated metrics of one side: times and counts summed (or averaged per rank), ratios
    pooled (sum of overlap / sum of its denominator) and their per-rank mean and median."""
    n = max(len(frame), 1)
    scale = 1.0 / n if per_rank_mean else 1.0
    totals = frame[list(TIME_METRICS + COUNT_METRICS)].sum(min_count=1) * scale
    comm, overlap = frame["comm_ns"].sum(), frame["overlap_ns"].sum()
    shorter = np.minimum(frame["comm_ns"], frame["compute_ns"]).sum()
    ratios = frame["overlap_ratio"]
    return pd.concat([
        pd.Series({
            "overlap_ratio": overlap / comm if comm > 0 else np.nan,
            "overlap_ratio_rank_mean": ratios.mean(),
            "overlap_ratio_rank_median": ratios.median(),
            "overlap_ratio_rank_min": ratios.min(),
            "hidden_fraction_of_min": overlap / shorter if shorter > 0 else np.nan,
        }),
        totals,
    ]).astype(float)


# ---------------------------------------------------------------- iterations

def iteration_table(report: AnalysisReport) -> pd.DataFrame:
    """Per step of one set: duration (slowest rank: a step ends when its last rank does),
    GPU activities per rank (median) and exposed communication (mean per rank)."""
    frames = [m.iterations.assign(rank=m.rank) for m in report.ranks if not m.iterations.empty]
    cols = ["step", "duration_ns", "n_gpu", "exposed_comm_ns", "n_ranks"]
    if not frames:
        return pd.DataFrame({c: [] for c in cols})
    it = pd.concat(frames, ignore_index=True)
    it["duration_ns"] = it["window_end_ns"] - it["window_start_ns"]
    per_step = it.groupby("step", sort=True).agg(duration_ns=("duration_ns", "max"), n_gpu=("n_gpu", "median"),
                                                 exposed_comm_ns=("exposed_comm_ns", "mean"),
                                                 n_ranks=("rank", "nunique"))
    return per_step.reset_index()[cols]


def iteration_stats(report: AnalysisReport) -> dict[str, Any]:
    """Distribution of iteration time of one set: median, worst, quartiles and the spread.

    spread = half the interquartile range of per-iteration times: robust to the one slow
    warm-up step, and what a difference of medians must exceed to mean something.
    """
    it = iteration_table(report)
    if it.empty:
        return {"n": 0, "steps": []}
    d = it["duration_ns"].to_numpy(dtype=float)
    p25, p75 = np.percentile(d, [25, 75])
    return {
        "n": int(len(it)),
        "steps": it["step"].astype(int).tolist(),
        "iteration_ns_median": float(np.median(d)),
        "iteration_ns_worst": float(d.max()),
        "iteration_ns_min": float(d.min()),
        "iteration_ns_p25": float(p25),
        "iteration_ns_p75": float(p75),
        "spread_ns": float((p75 - p25) / 2),
        "durations_ns": d.tolist(),
        "kernels_per_step_median": float(it["n_gpu"].median()),
        "exposed_comm_ns_per_step_median": float(it["exposed_comm_ns"].median()),
    }
