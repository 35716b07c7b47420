"""Kernel-time deltas by normalized name, and the findings / peer-wait / sync sections of two reports."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from analyzers.overlap.metrics import AnalysisOptions, selected_gpu
from analyzers.report import AnalysisReport
from analyzers.timeline.kernel_names import normalize_names
from analyzers.timeline.model import TraceSet

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
    if isinstance(sec, Mapping) and not isinstance(sec, dict):  # report.syncs: PackedFrames, unpacked here
        sec = dict(sec)
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


def harmful_syncs(section: Any) -> Any:
    """The blocking syncs that left the GPU idle (gpu_idle_ns > 0), where the section says so: a sync that
    caused no GPU idle (the closing cudaDeviceSynchronize of a run) cost the schedule nothing, so its host time
    is not summed as if it had. A section without per-sync idle is returned as it is."""
    def keep(df: pd.DataFrame) -> pd.DataFrame:
        return df[df["gpu_idle_ns"].fillna(0) > 0] if "gpu_idle_ns" in df.columns else df

    if isinstance(section, pd.DataFrame):
        return keep(section)
    if isinstance(section, dict) and section and all(isinstance(v, pd.DataFrame) for v in section.values()):
        return {k: keep(v) for k, v in section.items()}
    return section

