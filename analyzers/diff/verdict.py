"""Where two runs differ in structure, and the one-line verdict on which schedule is better."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analyzers.diff.rank_metrics import _ranges
from analyzers.diff.result import IDENTICAL, SAME_OVERLAP_POINTS, SAME_TIME_FRACTION
from analyzers.report import AnalysisReport
from analyzers.timeline.model import TraceSet

# ---------------------------------------------------------------- structure notes

def _gpu_models(traces: TraceSet) -> list[str]:
    """GPU model names of the devices the set's activity ran on (all known devices if none match)."""
    models: set[str] = set()
    for t in traces:
        used = set(np.unique(t.gpu["device"].to_numpy()).tolist()) if not t.gpu.empty else set()
        names = {t.devices[d] for d in used if d in t.devices} or set(t.devices.values())
        models |= {n for n in names if n}
    return sorted(models)


def structure_notes(ra: AnalysisReport, rb: AnalysisReport, ta: TraceSet, tb: TraceSet,
                    ia: dict[str, Any], ib: dict[str, Any]) -> list[tuple[str, bool]]:
    """Where the two runs differ in shape, so that a reader does not take apples for oranges.

    Each note comes with whether it says the runs are different jobs (format, world size,
    rank count, GPU model: the verdict then warns) or only differently shaped profiles
    (iteration counts, step numbers, activities per step: a schedule change may do that).
    """
    notes: list[tuple[str, bool]] = []
    if ta.fmt != tb.fmt:
        notes.append((f"trace formats differ: A {ta.fmt}, B {tb.fmt}", True))
    if ra.world_size != rb.world_size:
        notes.append((f"world sizes differ: A {ra.world_size or 'unknown'}, B {rb.world_size or 'unknown'}", True))
    if len(ra.ranks) != len(rb.ranks):
        notes.append((f"rank counts differ: A {len(ra.ranks)}, B {len(rb.ranks)} "
                      "(aggregated times are means per rank)", True))
    ga, gb = _gpu_models(ta), _gpu_models(tb)
    if ga and gb and ga != gb:
        notes.append((f"GPU models differ: A {', '.join(ga)}; B {', '.join(gb)}", True))
    if ia["n"] != ib["n"]:
        notes.append((f"iteration counts differ: A {ia['n']}, B {ib['n']}", False))
    elif ia["n"] and ia["steps"] != ib["steps"]:
        notes.append((f"step numbers differ: A {_ranges(ia['steps'])}, B {_ranges(ib['steps'])}", False))
    if ia["n"] and ib["n"] and ia["kernels_per_step_median"] != ib["kernels_per_step_median"]:
        notes.append((f"iteration structure differs: {ia['kernels_per_step_median']:g} GPU activities per step "
                      f"in A, {ib['kernels_per_step_median']:g} in B", False))
    if bool(ia["n"]) != bool(ib["n"]):
        notes.append((f"only {'A' if ia['n'] else 'B'} has iterations (ProfilerStep / step ranges)", False))
    return notes


# ---------------------------------------------------------------- verdict

def _ms(ns: float) -> str:
    """Milliseconds with three significant digits (no exponent)."""
    v = ns / 1e6
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def verdict(labels: tuple[str, str], agg: pd.DataFrame, ia: dict[str, Any], ib: dict[str, Any],
            identical: bool, different_jobs: bool = False) -> str:
    """One line: which side hides more communication and which is faster, by how much, and
    whether the time difference exceeds the iteration-to-iteration spread."""
    if identical:
        return IDENTICAL
    la, lb = labels
    get = agg.set_index("metric")
    oa, ob = get.at["overlap_ratio", "a"], get.at["overlap_ratio", "b"]
    parts: list[tuple[str | None, str]] = []  # (subject, clause)
    if np.isnan(oa) and np.isnan(ob):
        parts.append((None, "no communication on either side"))
    elif np.isnan(oa) or np.isnan(ob):
        has = la if not np.isnan(oa) else lb
        parts.append((None, f"only {has} has communication"))
    elif abs(ob - oa) * 100 < SAME_OVERLAP_POINTS:
        parts.append((None, "neither hides any communication" if max(oa, ob) == 0
                      else f"both hide {_pct(oa)} of communication"))
    else:
        # B's gain reads as A -> B; A's as a comparison, never as an arrow that runs backwards from its subject
        parts.append((lb, f"hides {100 * (ob - oa):.1f} points more communication (overlap {_pct(oa)} -> {_pct(ob)})")
                     if ob > oa else (la, f"hides {100 * (oa - ob):.1f} points more communication "
                                          f"(overlap {_pct(oa)} in {la} vs {_pct(ob)} in {lb})"))
    if ia["n"] and ib["n"]:
        ta, tb = ia["iteration_ns_median"], ib["iteration_ns_median"]
        what, spread = "per iteration", ia["spread_ns"] + ib["spread_ns"]
        judge = ia["n"] >= 2 and ib["n"] >= 2
    else:
        ta, tb = get.at["span_ns", "a"], get.at["span_ns", "b"]
        what, spread, judge = "in GPU span (no iterations to compare)", 0.0, False
    slow = max(ta, tb)
    if slow <= 0 or abs(tb - ta) / slow < SAME_TIME_FRACTION:
        parts.append((None, f"both take {_ms(ta)} ms {what}"))
    else:
        fast = lb if tb < ta else la
        clause = (f"{100 * abs(tb - ta) / slow:.1f}% faster {what} " + (f"({_ms(ta)} -> {_ms(tb)} ms)" if tb < ta
                  else f"({_ms(ta)} ms in {la} vs {_ms(tb)} ms in {lb})"))
        if judge:
            beyond = abs(tb - ta) > spread
            clause += f", {'beyond' if beyond else 'within'} the iteration spread (±{_ms(spread)} ms)"
        parts.append((fast, "is " + clause))
    (s1, c1), (s2, c2) = parts
    if s1 is not None and s1 == s2:
        line = f"{s1} {c1} and {c2}"
    else:
        line = "; ".join(f"{s} {c}" if s else c for s, c in ((s1, c1), (s2, c2)))
    if different_jobs:
        line += " — but the runs differ in structure (see notes)"
    return line
