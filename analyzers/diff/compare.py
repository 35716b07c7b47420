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

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analyzers.overlap.metrics import AnalysisOptions, selected_gpu
from analyzers.report import AnalysisReport, _clean
from analyzers.timeline.iterations import DEFAULT_STEP_PATTERN, assign_steps, gpu_step_windows, host_steps
from analyzers.timeline.kernel_names import normalize_names
from analyzers.timeline.model import TraceSet

# Metrics compared per rank. Times and counts add up across ranks; ratios do not.
TIME_METRICS = ("comm_ns", "compute_ns", "overlap_ns", "exposed_comm_ns", "busy_ns", "span_ns", "idle_ns",
                "compute_compute_overlap_ns")
COUNT_METRICS = ("n_comm", "n_compute", "n_gpu")
RATIO_METRICS = ("overlap_ratio", "hidden_fraction_of_min")
ITERATION_METRICS = ("iteration_ns_median", "iteration_ns_worst", "exposed_comm_ns_median")
RANK_METRICS = RATIO_METRICS + TIME_METRICS + ITERATION_METRICS + COUNT_METRICS

# Verdict thresholds (named, not buried): differences below these read as "the same".
SAME_OVERLAP_POINTS = 0.05  # percentage points of overlap ratio
SAME_TIME_FRACTION = 0.0005  # relative iteration-time difference

# Where other analyses leave their totals (first path that leads to numbers wins; "*" sums over
# ranks or records). analyze() attaches report.cross_rank (CrossRankReport: peer_wait, rank ->
# totals with wait_ns) and report.syncs (rank -> DataFrame of blocking syncs, host_blocked_ns);
# plain dicts / records / DataFrames under report.extra work the same way.
PEER_WAIT_PATHS: tuple[tuple[str, ...], ...] = (
    ("peer_wait_ns",), ("total_peer_wait_ns",), ("peer_wait", "*", "wait_ns"), ("*", "wait_ns"))
BLOCKING_SYNC_PATHS: tuple[tuple[str, ...], ...] = (
    ("blocking_sync_ns",), ("host_blocked_ns",), ("total_host_blocked_ns",), ("*", "host_blocked_ns"),
    ("syncs", "*", "host_blocked_ns"), ("blocking_syncs", "*", "host_blocked_ns"), ("*", "*", "host_blocked_ns"))

IDENTICAL = "identical"


@dataclass
class TraceDiff:
    """Two analyzed trace sets side by side (see module docstring); plain data, JSON via to_dict()."""

    labels: tuple[str, str]
    sources: tuple[list[str], list[str]]
    rank_pairs: list[tuple[int, int]]
    ranks: pd.DataFrame  # long: rank_a, rank_b, metric, a, b, delta, rel
    aggregation: str  # how times were aggregated over ranks: "sum over ranks" | "mean per rank"
    aggregate: pd.DataFrame  # long: metric, a, b, delta, rel
    iterations: dict[str, Any]  # per side: n, steps, median/worst/min/p25/p75/spread, kernels per step
    kernels: pd.DataFrame  # per normalized name: count/total/mean per side, deltas; largest |total delta| first
    kernel_names: str  # normalization mode used for `kernels`
    findings: dict[str, Any]  # status, only_a, only_b, both, ranks_differ
    not_analyzed: list[str]  # sections neither report carries (peer wait, blocking syncs, findings)
    alignment: dict[str, Any]  # the iteration at which aligned_timelines puts both variants' time zero
    notes: list[str]
    verdict: str
    identical: bool
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return _clean({
            "labels": list(self.labels),
            "sources": {self.labels[0]: self.sources[0], self.labels[1]: self.sources[1]},
            "verdict": self.verdict,
            "identical": self.identical,
            "notes": self.notes,
            "rank_pairs": [list(p) for p in self.rank_pairs],
            "aggregation": self.aggregation,
            "aggregate": _records(self.aggregate),
            "ranks": _records(self.ranks),
            "iterations": self.iterations,
            "kernel_names": self.kernel_names,
            "kernels": _records(self.kernels),
            "findings": self.findings,
            "not_analyzed": self.not_analyzed,
            "alignment": self.alignment,
            **self.extra,
        })


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """DataFrame rows as JSON-ready dicts (NaN -> None)."""
    return _clean(df.astype(object).where(df.notna(), None).to_dict(orient="records"))


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


# ---------------------------------------------------------------- kernels

def kernel_stats(traces: TraceSet, report: AnalysisReport | None = None, options: AnalysisOptions | None = None,
                 mode: str = "normalized") -> pd.DataFrame:
    """Per normalized kernel name, averaged per rank: count, total_ns, category, kind.

    Uses the same GPU rows the metrics used (--like-hta, --steps), so the table and the
    overlap figures describe one window.
    """
    options = options or AnalysisOptions()
    restricted = options.steps.steps is not None or options.window_ns is not None
    frames = []
    for trace in traces:
        gpu, _, _ = selected_gpu(trace, options)
        if restricted and report is not None:
            whole = report.rank(trace.rank).whole
            lo, hi = whole.window_start_ns, whole.window_end_ns
            s, e = gpu["start_ns"].to_numpy(), gpu["end_ns"].to_numpy()
            gpu = gpu[((e > lo) & (s < hi)) | ((s == e) & (s >= lo) & (s < hi))]
        table = normalize_names(trace.names.names, mode)
        frames.append(pd.DataFrame({
            "name": table[gpu["name_id"].to_numpy(dtype=np.int64)] if len(table) else np.zeros(0, dtype=object),
            "category": gpu["category"].astype(str).to_numpy(),
            "kind": gpu["kind"].astype(str).to_numpy(),
            "dur": (gpu["end_ns"] - gpu["start_ns"]).to_numpy(dtype=np.int64),
        }))
    cols = ["name", "category", "kind", "count", "total_ns"]
    if not frames:
        return pd.DataFrame({c: [] for c in cols})
    df = pd.concat(frames, ignore_index=True)
    out = df.groupby("name", sort=True).agg(category=("category", "first"), kind=("kind", "first"),
                                            count=("dur", "size"), total_ns=("dur", "sum"))
    n = max(len(traces), 1)
    out["count"] = out["count"] / n
    out["total_ns"] = out["total_ns"] / n
    return out.reset_index()[cols]


def kernel_deltas(ka: pd.DataFrame, kb: pd.DataFrame) -> pd.DataFrame:
    """Outer join of two kernel_stats tables with count / total / mean deltas, largest |total delta| first."""
    m = ka.merge(kb, on="name", how="outer", suffixes=("_a", "_b"))
    m["category"] = m["category_a"].fillna(m["category_b"])
    m["kind"] = m["kind_a"].fillna(m["kind_b"])
    for side in ("a", "b"):
        m[f"count_{side}"] = m[f"count_{side}"].fillna(0.0)
        m[f"total_ns_{side}"] = m[f"total_ns_{side}"].fillna(0.0)
        m[f"mean_ns_{side}"] = m[f"total_ns_{side}"] / m[f"count_{side}"].where(m[f"count_{side}"] > 0)
    m["count_delta"] = m["count_b"] - m["count_a"]
    m["total_ns_delta"] = m["total_ns_b"] - m["total_ns_a"]
    m["total_rel"] = m["total_ns_delta"] / m["total_ns_a"].where(m["total_ns_a"] > 0)
    m.loc[m["total_ns_delta"] == 0, "total_rel"] = 0.0
    m["mean_ns_delta"] = m["mean_ns_b"] - m["mean_ns_a"]
    m["presence"] = np.select([m["count_a"] == 0, m["count_b"] == 0], ["only B", "only A"], "both")
    m["_key"] = m["total_ns_delta"].abs()
    m = m.sort_values(["_key", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)
    return m[["name", "category", "kind", "presence", "count_a", "count_b", "count_delta", "total_ns_a",
              "total_ns_b", "total_ns_delta", "total_rel", "mean_ns_a", "mean_ns_b", "mean_ns_delta"]]


# ---------------------------------------------------------------- findings, peer wait, blocking syncs

def report_findings(report: AnalysisReport) -> list[dict[str, Any]] | None:
    """The report's findings as dicts (id, ranks, title, ...), or None when none were analyzed
    (analyze(..., diagnose=False))."""
    found = getattr(report, "findings", None)
    if found is None:
        found = report.extra.get("findings")
    if found is None:
        return None
    return [f.to_dict() if hasattr(f, "to_dict") else dict(f) for f in found]


def _finding_ranks(findings: list[dict[str, Any]], rank_map: dict[int, int]) -> dict[str, set[int]]:
    """id -> the ranks it was found on (mapped to A's rank ids)."""
    out: dict[str, set[int]] = {}
    for f in findings:
        out.setdefault(str(f.get("id")), set()).update(rank_map.get(int(r), int(r)) for r in (f.get("ranks") or []))
    return out


def diff_findings(a: AnalysisReport, b: AnalysisReport, pairs: list[tuple[int, int]]) -> dict[str, Any]:
    """Findings present on one side only (by id), and ids found on both sides but on other ranks.

    B's ranks are mapped to A's through the rank pairing, so "rank 1" means the same GPU slot.
    """
    fa, fb = report_findings(a), report_findings(b)
    if fa is None and fb is None:
        return {"status": "not analyzed", "only_a": [], "only_b": [], "both": [], "ranks_differ": []}
    status = "analyzed" if fa is not None and fb is not None else \
        f"analyzed on {'A' if fa is not None else 'B'} only"
    fa, fb = fa or [], fb or []
    b_to_a = {rb: ra for ra, rb in pairs}
    ids_a, ids_b = _finding_ranks(fa, {}), _finding_ranks(fb, b_to_a)
    slim = ("id", "severity", "ranks", "title")
    return {
        "status": status,
        "only_a": [{k: f.get(k) for k in slim} for f in fa if str(f.get("id")) not in ids_b],
        "only_b": [{k: f.get(k) for k in slim} for f in fb if str(f.get("id")) not in ids_a],
        "both": sorted(set(ids_a) & set(ids_b)),
        "ranks_differ": [{"id": i, "ranks_a": sorted(ids_a[i]), "ranks_b": sorted(ids_b[i])}
                         for i in sorted(set(ids_a) & set(ids_b)) if ids_a[i] != ids_b[i]],
    }


def _section(report: AnalysisReport, name: str) -> Any:
    """A section another analysis attached: the report's attribute (analyze sets cross_rank,
    syncs, findings), else report.extra[name]; None when absent or empty (not analyzed)."""
    sec = getattr(report, name, None)
    if sec is None or (isinstance(sec, (dict, list)) and not sec):
        sec = report.extra.get(name)
    if isinstance(sec, (dict, list)) and not sec:
        return None
    return sec


def _sum_path(obj: Any, path: tuple[str, ...]) -> float | None:
    """Follow `path` into nested dicts / lists / DataFrames; "*" sums over every item there."""
    if isinstance(obj, pd.DataFrame):  # records as rows: ("*", column) or, inside a "*", (column,)
        col = path[1] if len(path) == 2 and path[0] == "*" else path[0] if len(path) == 1 else None
        return float(obj[col].sum()) if col in obj.columns else None
    if path and path[0] != "*" and not isinstance(obj, (dict, list)) and hasattr(obj, path[0]):
        return _sum_path(getattr(obj, path[0]), path[1:])  # an analysis' report object (CrossRankReport)
    if not path:
        if isinstance(obj, (int, float, np.integer, np.floating)) and not isinstance(obj, bool):
            return float(obj)
        if isinstance(obj, dict):  # per-rank numbers
            nums = [float(v) for v in obj.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
            return float(sum(nums)) if nums else None
        return None
    head, rest = path[0], path[1:]
    if head == "*":
        items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list) else []
        found = [x for x in (_sum_path(item, rest) for item in items) if x is not None]
        return float(sum(found)) if found else None
    if isinstance(obj, dict) and head in obj:
        return _sum_path(obj[head], rest)
    return None


def section_total(section: Any, paths: tuple[tuple[str, ...], ...]) -> float | None:
    """A total (ns) out of another analysis' section, by the first of `paths` that leads to numbers.

    A path is a tuple of keys; "*" sums over the items of a dict (e.g. per rank), a list of
    records or the rows of a DataFrame. None when no path fits (the section says nothing).
    """
    if section is None:
        return None
    for path in paths:
        found = _sum_path(section, path)
        if found is not None:
            return found
    return None


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
        parts.append((lb if ob > oa else la, f"hides {100 * abs(ob - oa):.1f} points more communication "
                                             f"(overlap {_pct(oa)} -> {_pct(ob)})"))
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
        clause = f"{100 * abs(tb - ta) / slow:.1f}% faster {what} ({_ms(ta)} -> {_ms(tb)} ms)"
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


# ---------------------------------------------------------------- timelines

def _origin(traces: TraceSet, step: int | None, pattern: str) -> tuple[int, int | None]:
    """Time zero of one variant: the GPU start of `step` (earliest rank), or its first GPU activity."""
    starts = []
    for t in traces:
        w = gpu_step_windows(t, pattern)
        if step is not None and not w.empty:
            w = w[w["step"] == step]
            if not w.empty:
                starts.append(int(w["gpu_start_ns"].min()))
    if starts:
        return min(starts), step
    firsts = [int(t.gpu["start_ns"].min()) for t in traces if not t.gpu.empty]
    return (min(firsts) if firsts else 0), None


def _steps_of(traces: TraceSet, pattern: str) -> list[int]:
    found: set[int] = set()
    for t in traces:
        found |= set(gpu_step_windows(t, pattern)["step"].astype(int).tolist())
    return sorted(found)


def alignment_step(traces_a: TraceSet, traces_b: TraceSet, step: int | None = None,
                   pattern: str = DEFAULT_STEP_PATTERN) -> dict[str, Any]:
    """Which iteration each variant is aligned at: the given step, else the first step both
    have, else each one's first step; with each variant's time zero (ns, own clock)."""
    sa, sb = _steps_of(traces_a, pattern), _steps_of(traces_b, pattern)
    if step is not None:
        if step not in sa or step not in sb:
            raise ValueError(f"step {step} is not in both sets "
                             f"(A: {_ranges(sa) or 'none'}, B: {_ranges(sb) or 'none'})")
        pa = pb = step
    else:
        common = sorted(set(sa) & set(sb))
        pa = pb = common[0] if common else None
        if pa is None:
            pa, pb = (sa[0] if sa else None), (sb[0] if sb else None)
    oa, pa = _origin(traces_a, pa, pattern)
    ob, pb = _origin(traces_b, pb, pattern)
    return {"step_a": pa, "step_b": pb, "origin_ns_a": oa, "origin_ns_b": ob,
            "how": "iteration start" if pa is not None and pb is not None else "first GPU activity"}


def aligned_timelines(traces_a: TraceSet, traces_b: TraceSet, step: int | None = None,
                      labels: tuple[str, str] = ("A", "B"), pattern: str = DEFAULT_STEP_PATTERN,
                      only_step: bool = False) -> pd.DataFrame:
    """GPU intervals of both sets on one time axis, for drawing A over B.

    Columns: variant, rank, device, stream, start_ns, end_ns (relative to the start of the
    aligned iteration's GPU window of each variant, so both start at 0), step (-1 outside
    every step), category, kind, name. Ranks of one variant keep their offsets to each
    other. only_step keeps just the aligned iteration's activities. The alignment used is
    in ``df.attrs["alignment"]``.
    """
    align = alignment_step(traces_a, traces_b, step, pattern)
    frames = []
    for label, traces, side in ((labels[0], traces_a, "a"), (labels[1], traces_b, "b")):
        origin, chosen = align[f"origin_ns_{side}"], align[f"step_{side}"]
        for t in traces:
            gpu = t.gpu
            steps = assign_steps(t, host_steps(t, pattern))
            df = pd.DataFrame({
                "variant": label, "rank": t.rank,
                "device": gpu["device"].to_numpy(), "stream": gpu["stream"].to_numpy(),
                "start_ns": gpu["start_ns"].to_numpy() - origin, "end_ns": gpu["end_ns"].to_numpy() - origin,
                "step": steps, "category": gpu["category"].astype(str).to_numpy(),
                "kind": gpu["kind"].astype(str).to_numpy(),
                "name": t.names_of(gpu["name_id"].to_numpy()) if len(gpu) else np.zeros(0, dtype=object),
            })
            if only_step and chosen is not None:
                df = df[df["step"] == chosen]
            frames.append(df)
    cols = ["variant", "rank", "device", "stream", "start_ns", "end_ns", "step", "category", "kind", "name"]
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame({c: [] for c in cols})
    out = out[cols].sort_values(["variant", "rank", "start_ns"], kind="stable").reset_index(drop=True)
    out.attrs["alignment"] = align
    return out


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
        xa, xb = section_total(_section(a, name), keys), section_total(_section(b, name), keys)
        if xa is None and xb is None:
            not_analyzed.append(metric)
            if metric == "peer_wait_ns" and min(len(a.ranks), len(b.ranks)) < 2:
                notes.append("peer wait needs two or more ranks on each side")
            continue
        va[metric] = np.nan if xa is None else xa
        vb[metric] = np.nan if xb is None else xb
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
        identical=identical,
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
