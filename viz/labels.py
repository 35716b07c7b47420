"""Each metric's human label, unit, format and help text: the one place the CLI, the HTML report and the
app take them from, so a figure reads the same everywhere (JSON keeps the keys).

Here in viz/, the package both front ends (overlapscope/ and app/) stand on without importing each other.
Light to import (no pandas): the CLI draws a cached report with it before the analysis stack loads.

Kinds and how they read: ``time`` (ns in the data) in ms, ``ratio`` (a fraction) in percent, ``count``
with thousands separators, ``gbps`` (a bandwidth) in GB/s, ``bytes`` in MiB, ``id`` (rank, step, stream; -1
means none) as is, ``text`` as is (a flag as yes / no). A value that
exists but is undefined (a ratio of nothing: None or NaN) reads ``n/a``; a value that is not there at all
(no step, a side without it, an id of -1) reads ``—``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

UNDEFINED = "n/a"
ABSENT = "—"
UNITS = {"time": "ms", "ratio": "%", "count": "", "gbps": "GB/s", "bytes": "MiB", "id": "", "text": ""}


@dataclass(frozen=True)
class Metric:
    key: str  # the data's name (JSON key, column)
    label: str  # how people read it, without unit: "exposed communication"
    kind: str = "time"  # time | ratio | count | gbps | bytes | id | text
    help: str = ""  # one sentence: what it means
    better: int = 0  # +1 higher helps overlap or speed, -1 lower does, 0 neither (colours deltas)
    short: str = ""  # a narrow column's header, without unit; default label

    @property
    def short_label(self) -> str:
        return self.short or self.label

    @property
    def unit(self) -> str:
        return UNITS[self.kind]

    def header(self) -> str:
        """Column header with the unit of a time, bandwidth or size column: "exposed communication (ms)"."""
        return f"{self.label} ({self.unit})" if self.kind in ("time", "gbps", "bytes") else self.label


def _m(key: str, label: str, kind: str = "time", help: str = "", better: int = 0, short: str = "") -> Metric:
    return Metric(key, label, kind, help, better, short)


_ALL = [
    # per rank, stream or window (analyzers.overlap.metrics.OverlapMetrics)
    _m("overlap_ratio", "overlap ratio (overlap/comm)", "ratio",
       "overlap / comm: the share of communication time hidden behind compute", +1, "overlap"),
    _m("hidden_fraction_of_min", "hidden / min(comm, compute)", "ratio",
       "overlap / min(comm, compute): 100 % = the shorter side is fully hidden", +1, "hidden/min"),
    _m("comm_ns", "communication", help="GPU time with a communication kernel running", short="comm"),
    _m("compute_ns", "compute", help="GPU time with a compute kernel running"),
    _m("overlap_ns", "overlap", help="time communication and compute ran at once", better=+1),
    _m("exposed_comm_ns", "exposed communication", help="comm − overlap: communication time nothing hid",
       better=-1, short="exposed comm"),
    _m("compute_compute_overlap_ns", "compute/compute overlap", help="time two compute kernels ran at once"),
    _m("busy_ns", "GPU busy", help="time any kernel or copy ran"),
    _m("span_ns", "GPU span", help="first GPU activity start to last end", better=-1),
    _m("idle_ns", "GPU idle", help="span − busy: time no kernel ran", better=-1),
    _m("n_comm", "comm activities", "count"),
    _m("n_compute", "compute activities", "count"),
    _m("n_gpu", "GPU activities", "count"),
    _m("window_start_ns", "window start"),
    _m("window_end_ns", "window end"),
    # iterations
    _m("iteration_ns_median", "iteration time, median", better=-1, short="iteration median"),
    _m("iteration_ns_worst", "iteration time, worst", better=-1),
    _m("iteration_ns_min", "iteration time, best", better=-1),
    _m("iteration_ns_p25", "iteration time, 25th percentile", better=-1),
    _m("iteration_ns_p75", "iteration time, 75th percentile", better=-1),
    _m("spread_ns", "iteration spread (± half IQR)", better=-1),
    _m("exposed_comm_ns_per_step_median", "exposed comm per iteration, median", better=-1),
    _m("exposed_comm_ns_median", "exposed comm per iteration, median", better=-1),
    _m("overlap_ratio_median", "overlap ratio, median step", "ratio", better=+1),
    _m("overlap_ratio_worst", "overlap ratio, worst step", "ratio", better=+1),
    _m("overlap_ratio_rank_mean", "overlap ratio, mean of ranks", "ratio", better=+1),
    _m("overlap_ratio_rank_median", "overlap ratio, median rank", "ratio", better=+1),
    _m("overlap_ratio_rank_min", "overlap ratio, worst rank", "ratio", better=+1),
    _m("kernels_per_step_median", "GPU activities per step, median", "count"),
    _m("n", "iterations", "count"),
    # totals from other analyses
    _m("peer_wait_ns", "peer wait", help="collective kernel time spent waiting for the last rank", better=-1),
    _m("blocking_sync_ns", "blocking-sync time (GPU idled)", better=-1,
       help="host time blocked in syncs that left the GPU idle; a sync that caused no GPU idle (a run's closing "
            "cudaDeviceSynchronize) is harmless and left out"),
    _m("sync_gpu_idle_ns", "GPU idle caused by syncs", better=-1,
       help="GPU time with nothing queued because the host was blocked in a sync"),
    # identifiers and names
    _m("rank", "rank", "id"),
    _m("rank_a", "rank A", "id"),
    _m("rank_b", "rank B", "id"),
    _m("step", "step", "id", "the profiler step (ProfilerStep#N) it fell in"),
    _m("stream", "stream", "id"),
    _m("device", "device", "id"),
    _m("run", "run", "text"),
    _m("name", "name", "text"),
    _m("category", "category", "text"),
    _m("presence", "in", "text", "both sides, or only one"),
    # blocking host syncs (analyzers.syncs.blocking)
    _m("api", "API", "text"),
    _m("kind", "kind", "text"),
    _m("caller", "caller", "text", "the innermost host op or annotation around the sync"),
    _m("sync_op", "sync-implying op", "text", "the op that made the host wait (aten::item, ...)"),
    _m("annotation", "annotation", "text"),
    _m("frame", "Python frame", "text"),
    _m("start_ns", "start", help="from the trace's first GPU activity"),
    _m("blocked_ns", "host blocked", help="how long the host waited", better=-1),
    _m("host_blocked_ns", "host blocked", help="how long the host waited", better=-1),
    _m("gpu_idle_ns", "GPU idle caused", help="GPU time with nothing queued because of the sync", better=-1),
    _m("sync_effect", "effect", "text", "whether the GPU went idle after the sync; one that caused no GPU idle "
       "(a run's closing cudaDeviceSynchronize) is harmless"),
    # cross-rank (analyzers.crossrank)
    _m("coll_id", "collective", "id"),
    _m("coll_name", "collective", "text"),
    _m("group", "group", "text"),
    _m("n_ranks", "ranks", "count"),
    _m("skew_ns", "arrival skew", help="last rank's start − first rank's start", better=-1),
    _m("late_rank", "late rank", "id", "the last rank to arrive (— when they arrived together)"),
    _m("max_wait_ns", "max wait", better=-1),
    _m("total_wait_ns", "total wait", better=-1),
    _m("n_collectives", "collectives", "count"),
    _m("n_collectives_last", "collectives last at", "count"),
    _m("kernel_ns", "kernel time"),
    _m("wait_ns", "wait", help="kernel time before the last rank arrived", better=-1),
    _m("transfer_ns", "transfer", help="kernel time after the last rank arrived"),
    _m("wait_fraction", "waiting share", "ratio", "wait / kernel time", -1),
    _m("effective_overlap_ratio", "effective overlap (transfer only)", "ratio",
       "overlap of the transfer part with compute", +1),
    _m("share_of_late_collectives", "share of late collectives", "ratio"),
    _m("wait_caused_ns", "wait caused", better=-1),
    _m("n_late", "times last", "count"),
    _m("worst_coll_id", "worst collective", "id"),
    _m("worst_wait_ns", "worst wait", better=-1),
    _m("kernel_x", "kernel X", "text"),
    _m("kernel_y", "kernel Y", "text"),
    _m("stream_x", "stream X", "id"),
    _m("stream_y", "stream Y", "id"),
    _m("first_on_a", "first on rank A", "text"),
    _m("first_on_b", "first on rank B", "text"),
    _m("waiting_rank", "waiting rank", "id"),
    _m("n_swapped_pairs", "swapped pairs", "count"),
    # diff columns
    _m("delta", "change", "text"),
    _m("rel", "change (%)", "ratio"),
    _m("count_a", "count A", "count"),
    _m("count_b", "count B", "count"),
    _m("total_ns_a", "total A"),
    _m("total_ns_b", "total B"),
    _m("total_ns_delta", "total change"),
    _m("total_rel", "total change (%)", "ratio"),
    _m("mean_ns_a", "mean A"),
    _m("mean_ns_b", "mean B"),
    _m("metric", "metric", "text"),
    # collectives' bandwidth per operation and size (analyzers.crossrank.collectives)
    _m("op", "operation", "text"),
    _m("size_bucket", "message size", "text"),
    _m("n_overlapped", "overlapped with compute", "count"),
    _m("bytes_median", "median size", "bytes"),
    _m("dur_median_ns", "median duration", better=-1),
    _m("wait_median_ns", "median wait", help="kernel time before the last rank arrived", better=-1),
    _m("transfer_median_ns", "median transfer", help="kernel time after the last rank arrived"),
    _m("algbw_median_gbps", "algorithm bandwidth, median", "gbps", "bytes / transfer time", +1, "algbw"),
    _m("busbw_median_gbps", "bus bandwidth, median", "gbps",
       "NCCL's bus bandwidth: algbw scaled by the operation's traffic factor", +1, "busbw"),
    _m("busbw_alone_median_gbps", "bus bandwidth alone, median", "gbps",
       "bus bandwidth of the activities that ran with no compute", +1, "busbw alone"),
    _m("busbw_overlapped_median_gbps", "bus bandwidth overlapped, median", "gbps",
       "bus bandwidth of the activities that ran alongside compute", +1, "busbw overlapped"),
    _m("link_fraction", "of link peak", "ratio", "median bus bandwidth / the link's peak", +1),
    # stragglers (analyzers.crossrank.stragglers)
    _m("host", "host", "text"),
    _m("ranks", "ranks", "text"),
    _m("outlier", "outlier", "text", "robust z-score of the median lateness above the threshold"),
    _m("outliers", "outlier ranks", "text"),
    _m("z", "robust z-score", "text", "how far the rank's median lateness lies from the others'"),
    _m("n_last", "times last", "count", "collectives the rank was the last to reach"),
    _m("last_share", "share last", "ratio", "times last / collectives", -1),
    _m("median_lateness_ns", "median lateness", help="start − the first rank's start, median", better=-1),
    _m("worst_lateness_ns", "worst lateness", better=-1),
    _m("before_mostly", "before: mostly", "text", "what the rank's GPU held most before its late arrivals"),
    _m("before_window_ns", "before: window"),
    _m("before_compute_ns", "before: compute"),
    _m("before_other_gpu_ns", "before: other GPU work"),
    _m("before_idle_ns", "before: idle GPU"),
]
METRICS: dict[str, Metric] = {m.key: m for m in _ALL}


def metric(key: str) -> Metric:
    """The registered metric, or one read from the name (``*_ns`` a time, ``*ratio``/``*fraction`` a ratio,
    ``n_*`` a count) with the underscores turned into words, so no raw identifier reaches a reader."""
    if key in METRICS:
        return METRICS[key]
    words = key.removesuffix("_ns").replace("_ns_", " ").replace("_", " ").strip()
    if key.endswith("_ns") or "_ns_" in key:
        return Metric(key, words, "time")
    if key.endswith(("ratio", "fraction", "share")) or "_share_" in key or key.startswith(("share_", "fraction_")):
        return Metric(key, words, "ratio")  # share_of_span: a ratio, in percent
    if key.startswith("n_"):
        return Metric(key, words.removeprefix("n ") + " (count)", "count")
    return Metric(key, words, "text")


def label(key: str) -> str:
    return metric(key).label


def header(key: str) -> str:
    return metric(key).header()


def missing(v: Any) -> bool:
    """None, NaN or pandas' missing value (checked without importing pandas)."""
    if v is None:
        return True
    try:
        return v != v or (isinstance(v, float) and math.isinf(v))  # NaN is the one value not equal to itself
    except (TypeError, ValueError):  # pandas.NA refuses bool()
        return True


def number(kind: str, v: Any) -> str:
    """v in a column whose header carries the unit: times as 12.345 (ms), ratios 51.1%, counts 1,234."""
    if kind in ("id", "text"):
        return value(kind, v)
    if missing(v):
        return UNDEFINED
    if kind == "time":
        return f"{v / 1e6:.3f}"
    if kind == "ratio":
        return f"{100 * v:.1f}%"
    if kind == "gbps":
        return f"{v:,.1f}"
    if kind == "bytes":
        return f"{v / 2**20:,.2f}"
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.1f}"


def value(kind: str, v: Any) -> str:
    """v with its unit where it has one: 12.345 ms, 51.1%, 1,234; an id of -1 or none, or no text, as —."""
    if kind == "id":
        if missing(v) or (isinstance(v, (int, float)) and v < 0):
            return ABSENT
        return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)
    if kind == "text":
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, float) and not missing(v):
            return f"{v:.4g}"
        return ABSENT if missing(v) or v == "" else str(v)
    if kind == "time" and not missing(v):
        return f"{v / 1e6:,.3f} ms"
    if kind in ("gbps", "bytes") and not missing(v):
        return f"{number(kind, v)} {UNITS[kind]}"
    return number(kind, v)


def delta(kind: str, v: Any) -> str:
    """A difference B − A: ratios in percentage points, times in ms, with the sign."""
    if missing(v):
        return UNDEFINED
    if v == 0:
        return {"ratio": "0.0 pt", "time": "0.000 ms", "gbps": "0.0 GB/s", "bytes": "0.00 MiB"}.get(kind, "no change")
    if kind == "ratio":
        return f"{100 * v:+.1f} pt"
    if kind == "time":
        return f"{v / 1e6:+.3f} ms"
    if kind == "gbps":
        return f"{v:+,.1f} GB/s"
    if kind == "bytes":
        return f"{v / 2**20:+,.2f} MiB"
    return f"{v:+,.0f}" if float(v).is_integer() else f"{v:+,.1f}"


def relative(v: Any) -> str:
    """A relative change as a signed percentage (n/a where A was 0); past +900 % as a multiple of A (×315)."""
    if missing(v):
        return UNDEFINED
    if v > 9:
        return f"×{1 + v:,.0f}"
    return "0.0%" if v == 0 else f"{100 * v:+.1f}%"


def show(key: str, v: Any) -> str:
    """v of metric key as people read it (value with its unit)."""
    return value(metric(key).kind, v)
