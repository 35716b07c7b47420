"""Overlap metrics, exactly as DESIGN.md defines them (the contract).

For a window W and one rank:
  busy(X)   = union of the intervals of set X inside W (counted once across streams)
  comm      = |busy(comm)|, compute = |busy(compute)|, overlap = |busy(comm) ∩ busy(compute)|
  overlap_ratio          = overlap / comm            (HTA's comm/comp overlap)
  exposed_comm           = comm - overlap
  hidden_fraction_of_min = overlap / min(comm, compute)
  span = last end - first start of GPU activity in W; idle = span - |busy(all)|
Ratios are None (undefined) when their denominator is 0, never NaN.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analyzers.io.plain import records
from analyzers.overlap.rows import GpuRows, category_is
from analyzers.overlap.window_table import iteration_table
from analyzers.timeline import intervals as iv
from analyzers.timeline.classify import lookalike_note
from analyzers.timeline.iterations import (
    DEFAULT_STEP_PATTERN,
    StepSelection,
    format_ranges,
    gpu_step_windows,
    hta_rounded,
    like_hta_mask,
)
from analyzers.timeline.model import RankTrace


@dataclass
class OverlapMetrics:
    """The per-window numbers (all times int64 ns)."""

    window_start_ns: int
    window_end_ns: int
    comm_ns: int
    compute_ns: int
    overlap_ns: int
    exposed_comm_ns: int
    busy_ns: int
    span_ns: int
    idle_ns: int
    compute_compute_overlap_ns: int
    n_comm: int
    n_compute: int
    n_gpu: int
    overlap_ratio: float | None
    hidden_fraction_of_min: float | None

    def to_dict(self) -> dict:
        return dict(vars(self))  # flat fields: asdict's deep copy adds nothing


def _ratio(num: int, den: int) -> float | None:
    return float(num) / float(den) if den > 0 else None


def _clipped(rows: GpuRows, lo: int | None, hi: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start/end arrays clipped to the window, with a mask of rows that fall in it."""
    s, e = rows.s, rows.e
    if lo is None and hi is None:
        return s, e, np.ones(s.size, dtype=bool)
    lo_v = np.iinfo(np.int64).min if lo is None else lo
    hi_v = np.iinfo(np.int64).max if hi is None else hi
    cs, ce = np.clip(s, lo_v, hi_v), np.clip(e, lo_v, hi_v)
    # A zero-length activity belongs to the window it sits in; others need a positive overlap.
    inside = (ce > cs) | ((s == e) & (s >= lo_v) & (s < hi_v))
    return cs, ce, inside


def window_metrics(gpu: pd.DataFrame, lo: int | None = None, hi: int | None = None) -> OverlapMetrics:
    """Overlap metrics of one rank's GPU activity table inside [lo, hi) (None = unbounded)."""
    return _window_metrics(GpuRows.of(gpu), lo, hi)


def _window_metrics(rows: GpuRows, lo: int | None, hi: int | None) -> OverlapMetrics:
    s, e, inside = _clipped(rows, lo, hi)
    comm_m = inside & rows.comm
    comp_m = inside & rows.compute
    comm = iv.union(s[comm_m], e[comm_m])
    comp = iv.union(s[comp_m], e[comp_m])
    everything = iv.union(s[inside], e[inside])
    comm_ns, comp_ns = iv.length(comm), iv.length(comp)
    overlap_ns = iv.length(iv.intersection(comm, comp))
    busy_ns = iv.length(everything)
    if inside.any():
        span_ns = int(e[inside].max() - s[inside].min())
        w0, w1 = int(s[inside].min()), int(e[inside].max())
    else:
        span_ns = 0
        w0 = int(lo) if lo is not None else 0
        w1 = int(hi) if hi is not None else 0
    cc = _compute_compute_overlap(s[comp_m], e[comp_m], rows.stream[comp_m])
    return OverlapMetrics(
        window_start_ns=w0 if lo is None else int(lo),
        window_end_ns=w1 if hi is None else int(hi),
        comm_ns=comm_ns,
        compute_ns=comp_ns,
        overlap_ns=overlap_ns,
        exposed_comm_ns=comm_ns - overlap_ns,
        busy_ns=busy_ns,
        span_ns=span_ns,
        idle_ns=span_ns - busy_ns,
        compute_compute_overlap_ns=cc,
        n_comm=int(comm_m.sum()),
        n_compute=int(comp_m.sum()),
        n_gpu=int(inside.sum()),
        overlap_ratio=_ratio(overlap_ns, comm_ns),
        hidden_fraction_of_min=_ratio(overlap_ns, min(comm_ns, comp_ns)),
    )


def _groups_by_stream(s: np.ndarray, e: np.ndarray, streams: np.ndarray) -> list[iv.Intervals]:
    if s.size == 0:
        return []
    order = np.argsort(streams, kind="stable")
    st = streams[order]
    cuts = np.flatnonzero(np.diff(st)) + 1
    return [(a, b) for a, b in zip(np.split(s[order], cuts), np.split(e[order], cuts), strict=True)]


def _compute_compute_overlap(s: np.ndarray, e: np.ndarray, streams: np.ndarray) -> int:
    """Time when compute runs on two or more streams at once (why two-stream schedules exist)."""
    groups = _groups_by_stream(s, e, streams)
    if len(groups) < 2:
        return 0
    return iv.length(iv.covered_by_at_least(groups, 2))


def stream_table(gpu: pd.DataFrame, lo: int | None = None, hi: int | None = None) -> pd.DataFrame:
    """Per (device, stream): busy, comm and compute time, activity count, share of the span."""
    return _stream_table(GpuRows.of(gpu), lo, hi)


def _stream_table(rows: GpuRows, lo: int | None, hi: int | None) -> pd.DataFrame:
    s, e, inside = _clipped(rows, lo, hi)
    cols = ["device", "stream", "n", "busy_ns", "comm_ns", "compute_ns", "n_comm", "n_compute"]
    if not inside.any():
        return pd.DataFrame({c: [] for c in cols})
    dev, stream = rows.device[inside], rows.stream[inside]
    s, e, comm, comp = s[inside], e[inside], rows.comm[inside], rows.compute[inside]
    # groups of (device, stream) in ascending order, rows in table order within each
    order = np.lexsort((stream, dev))
    d_o, s_o = dev[order], stream[order]
    cuts = np.flatnonzero((d_o[1:] != d_o[:-1]) | (s_o[1:] != s_o[:-1])) + 1
    out = []
    for g in np.split(order, cuts):
        gs, ge, cm, pm = s[g], e[g], comm[g], comp[g]
        out.append({
            "device": int(dev[g[0]]), "stream": int(stream[g[0]]), "n": int(g.size),
            "busy_ns": iv.total_length(gs, ge),
            "comm_ns": iv.total_length(gs[cm], ge[cm]),
            "compute_ns": iv.total_length(gs[pm], ge[pm]),
            "n_comm": int(cm.sum()), "n_compute": int(pm.sum()),
        })
    return pd.DataFrame(out, columns=cols)


def stream_pair_overlap(gpu: pd.DataFrame, lo: int | None = None, hi: int | None = None) -> pd.DataFrame:
    """Matrix of |busy(stream i) ∩ busy(stream j)| in ns; the diagonal is each stream's busy time."""
    return _stream_pair_overlap(GpuRows.of(gpu), lo, hi)


def _stream_pair_overlap(rows: GpuRows, lo: int | None, hi: int | None) -> pd.DataFrame:
    s, e, inside = _clipped(rows, lo, hi)
    streams = rows.stream[inside]
    s, e = s[inside], e[inside]
    labels = sorted(pd.unique(streams).tolist())
    merged = {st: iv.union(s[streams == st], e[streams == st]) for st in labels}
    mat = np.zeros((len(labels), len(labels)), dtype=np.int64)
    for i, a in enumerate(labels):
        mat[i, i] = iv.length(merged[a])
        for j in range(i + 1, len(labels)):
            mat[i, j] = mat[j, i] = iv.length(iv.intersection(merged[a], merged[labels[j]]))
    return pd.DataFrame(mat, index=labels, columns=labels)


@dataclass
class AnalysisOptions:
    """What the user chose: which steps, HTA-compatible window, step pattern."""

    steps: StepSelection = field(default_factory=StepSelection)
    like_hta: bool = False
    step_pattern: str = DEFAULT_STEP_PATTERN
    window_ns: tuple[int, int] | None = None  # explicit [lo, hi) on the rank's clock


@dataclass
class RankMetrics:
    """Everything `analyze` reports for one rank."""

    rank: int
    source: str
    whole: OverlapMetrics
    streams: pd.DataFrame
    stream_pairs: pd.DataFrame
    iterations: pd.DataFrame  # one row per step: step, window, and OverlapMetrics columns
    iteration_summary: dict
    notes: list[str]

    # Convenience accessors used all over (CLI, app, diff, tests).
    @property
    def overlap_ratio(self) -> float | None:
        return self.whole.overlap_ratio

    @property
    def comm_ns(self) -> int:
        return self.whole.comm_ns

    @property
    def compute_ns(self) -> int:
        return self.whole.compute_ns

    @property
    def overlap_ns(self) -> int:
        return self.whole.overlap_ns

    def to_dict(self, iterations: bool = True) -> dict:
        """Plain data; iterations=False is the compact `analyze` document's form: no per-iteration rows (their
        summary stays), and past STREAMS_LISTED streams only the busiest, with n_streams, and the pair matrix
        over the PAIR_STREAMS_LISTED busiest, with n_pair_streams (`analyze --tables` writes every row)."""
        streams, pairs = (self.streams, self.stream_pairs) if iterations else listed_streams(self)
        out = {
            "rank": self.rank,
            "source": self.source,
            **self.whole.to_dict(),
            "streams": records(streams),
            **({"n_streams": len(self.streams)} if len(streams) < len(self.streams) else {}),
            "stream_pair_overlap_ns": {
                "streams": [int(x) for x in pairs.index],
                "matrix": pairs.to_numpy().tolist(),
                **({"n_pair_streams": len(self.stream_pairs)} if len(pairs) < len(self.stream_pairs) else {}),
            },
            "iterations": records(self.iterations) if iterations else None,
            "iteration_summary": self.iteration_summary,
            "notes": list(self.notes),
        }
        if not iterations:
            del out["iterations"]
        return out


# What the compact document lists of a rank's streams (they grow with the trace, the pair matrix as their
# square): the busiest first; every stream and pair is a row of `analyze --tables`.
STREAMS_LISTED = 16
PAIR_STREAMS_LISTED = 16


def listed_streams(m: RankMetrics) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the streams the document lists, the pair matrix it lists): all of them up to the caps; past a cap the
    busiest (ties: the table's order), in the table's order."""
    streams, pairs = m.streams, m.stream_pairs
    if len(streams) > STREAMS_LISTED:
        busiest = np.sort(np.argsort(-streams["busy_ns"].to_numpy(), kind="stable")[:STREAMS_LISTED])
        streams = streams.iloc[busiest]
    if len(pairs) > PAIR_STREAMS_LISTED:
        keep = np.sort(np.argsort(-np.diag(pairs.to_numpy()), kind="stable")[:PAIR_STREAMS_LISTED])
        pairs = pairs.iloc[keep, keep]
    return streams, pairs


def iteration_metrics(gpu: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """One row per step window with its OverlapMetrics.

    Each window only looks at the rows that can reach into it (sorted starts, bounded by the
    longest activity), so the cost grows with the rows per step, not steps x all rows.
    """
    return _iteration_metrics(GpuRows.of(gpu), windows)


def _iteration_metrics(rows: GpuRows, windows: pd.DataFrame) -> pd.DataFrame:
    """_window_metrics of every window, computed for all windows at once (overlap/window_table.py)."""
    if windows.empty:
        return pd.DataFrame([])
    return iteration_table(rows, windows)


def summarize_iterations(it: pd.DataFrame) -> dict:
    """Median and worst across iterations (worst: lowest overlap ratio, most exposed comm)."""
    if it.empty:
        return {"n": 0}
    dur = (it["window_end_ns"] - it["window_start_ns"]).to_numpy()
    ratio = it["overlap_ratio"].astype(float).to_numpy()
    defined = ratio[~np.isnan(ratio)]
    worst_idx = int(np.nanargmin(ratio)) if defined.size else None
    return {
        "n": int(len(it)),
        "iteration_ns_median": float(np.median(dur)),
        "iteration_ns_worst": int(dur.max()),
        "iteration_ns_min": int(dur.min()),
        "overlap_ratio_median": float(np.median(defined)) if defined.size else None,
        "overlap_ratio_worst": float(defined.min()) if defined.size else None,
        "worst_step": int(it["step"].iloc[worst_idx]) if worst_idx is not None else None,
        "exposed_comm_ns_median": float(np.median(it["exposed_comm_ns"])),
        "exposed_comm_ns_worst": int(it["exposed_comm_ns"].max()),
    }


def selected_gpu(trace: RankTrace, options: AnalysisOptions) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """The GPU rows and step windows the options select, with notes on what was dropped."""
    notes: list[str] = []
    gpu = trace.gpu
    if options.like_hta:
        keep = like_hta_mask(trace, options.step_pattern)
        dropped = int((~keep).sum())
        if dropped:
            notes.append(f"--like-hta: {dropped} GPU activities launched in the last profiler step "
                         "or without a launch in the trace were left out, as HTA does")
        gpu = gpu[keep].copy()
        if trace.meta.get("fractional_us_timestamps"):
            gpu["start_ns"], gpu["end_ns"] = hta_rounded(gpu["start_ns"].to_numpy(), gpu["end_ns"].to_numpy())
    windows = gpu_step_windows(trace, options.step_pattern)
    if options.steps.steps is not None:
        missing = options.steps.missing(windows["step"].astype(int).tolist())
        if missing:
            notes.append(f"steps not in this trace: {format_ranges(missing)}")
        windows = windows[options.steps.mask(windows["step"].to_numpy())].reset_index(drop=True)
    return gpu, windows, notes


def contiguous_runs(windows: pd.DataFrame) -> list[tuple[int, int]]:
    """Step windows merged where one ends as the next begins: [(lo, hi), ...] in time order."""
    w = windows.sort_values("gpu_start_ns", kind="stable")
    runs: list[tuple[int, int]] = []
    for lo, hi in zip(w["gpu_start_ns"].to_numpy(np.int64), w["gpu_end_ns"].to_numpy(np.int64), strict=True):
        if runs and int(lo) <= runs[-1][1]:
            runs[-1] = (runs[-1][0], max(runs[-1][1], int(hi)))
        else:
            runs.append((int(lo), int(hi)))
    return runs


def _clipped_to_runs(gpu: pd.DataFrame, runs: list[tuple[int, int]]) -> pd.DataFrame:
    """The GPU rows inside the runs, cut at their edges (what lies between runs is left out)."""
    s, e = gpu["start_ns"].to_numpy(np.int64), gpu["end_ns"].to_numpy(np.int64)
    parts = []
    for lo, hi in runs:
        inside = (e > lo) & (s < hi) | ((s == e) & (s >= lo) & (s < hi))
        part = gpu[inside].copy()
        part["start_ns"] = np.clip(part["start_ns"].to_numpy(np.int64), lo, hi)
        part["end_ns"] = np.clip(part["end_ns"].to_numpy(np.int64), lo, hi)
        parts.append(part)
    return pd.concat(parts, ignore_index=True) if parts else gpu.iloc[0:0]


def rank_metrics(trace: RankTrace, options: AnalysisOptions | None = None) -> RankMetrics:
    """Whole-window, per-stream, stream-pair and per-iteration metrics of one rank.

    With steps selected the whole window is the selected steps only: steps that are not next to
    each other (--steps 1,3) leave out what runs between them, and the span is the sum of the
    spans of each run of adjacent steps.
    """
    options = options or AnalysisOptions()
    gpu, windows, notes = selected_gpu(trace, options)
    lo = hi = None
    span_ns = None
    if options.window_ns is not None:
        lo, hi = options.window_ns
    elif options.steps.steps is not None:
        if windows.empty:
            lo = hi = 0
        else:
            lo, hi = int(windows["gpu_start_ns"].min()), int(windows["gpu_end_ns"].max())
            runs = contiguous_runs(windows)
            if len(runs) > 1:
                span_ns = sum(window_metrics(gpu, a, b).span_ns for a, b in runs)
                gpu = _clipped_to_runs(gpu, runs)
    rows = GpuRows.of(gpu)
    whole = _window_metrics(rows, lo, hi)
    if span_ns is not None:
        whole.span_ns, whole.idle_ns = span_ns, span_ns - whole.busy_ns
    its = _iteration_metrics(rows, windows)
    if windows.empty:
        notes.append("no ProfilerStep / step ranges found: per-iteration metrics unavailable")
    if whole.n_comm == 0:
        notes.append("no communication activity: overlap ratio undefined")
    lookalike = lookalike_note(trace, comm_found=bool(category_is(trace.gpu, "comm").any()))
    if lookalike:
        notes.append(lookalike)
    return RankMetrics(
        rank=trace.rank,
        source=trace.source,
        whole=whole,
        streams=_stream_table(rows, lo, hi),
        stream_pairs=_stream_pair_overlap(rows, lo, hi),
        iterations=its,
        iteration_summary=summarize_iterations(its),
        notes=notes + list(trace.notes),
    )
