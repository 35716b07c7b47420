"""What a diff holds: the metrics compared, when two values count as the same, and TraceDiff."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analyzers.report import _clean

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
    # per (operation, size bucket): bus bandwidth and sizes of A and B (analyzers.diff.collectives)
    collectives: pd.DataFrame = field(default_factory=pd.DataFrame)
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
            "collectives": _records(self.collectives),
            **self.extra,
        })


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """DataFrame rows as JSON-ready dicts (NaN -> None)."""
    return _clean(df.astype(object).where(df.notna(), None).to_dict(orient="records"))
