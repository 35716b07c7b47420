"""Iteration (step) windows on the GPU timeline.

Steps are host ranges (ProfilerStep#N from torch.profiler, or NVTX ranges of the same
name, or any host range whose name matches a user pattern). The GPU runs behind the host,
so a step's GPU window is not its host range: each GPU activity belongs to the step in
which its launch (runtime call, joined on correlation id) happened, and step N's GPU
window runs from the first start of its activities to the first start of step N+1's
(the last step ends at its last activity's end). Windows therefore tile the GPU timeline.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from analyzers.errors import BadInputError, UnknownStepsError
from analyzers.timeline import intervals as iv
from analyzers.timeline.constants import DEFAULT_STEP_PATTERN, NO_TIME
from analyzers.timeline.model import RankTrace, TraceSet, require_host_tables
from analyzers.timeline.user_regex import each

# Step numbers a selection or a trace may name: well inside int64, so that every comparison with the
# int64 step columns is exact (a larger number is refused by name, never wrapped or overflowed).
MAX_STEP = 2**53


@dataclass(frozen=True)
class StepSelection:
    """Which steps to keep: None = all; otherwise inclusive (first, last) ranges, sorted and merged.
    Ranges, not sets: `--steps 0-2000000000` costs two numbers, and is checked against the steps a
    trace holds (check_step_selection), never enumerated."""

    steps: tuple[tuple[int, int], ...] | None = None

    @classmethod
    def parse(cls, text: str | None) -> StepSelection:
        """'3', '2-4', '2,5,7-8' -> step ranges. Raises ValueError on bad text."""
        if not text:
            return cls(None)
        chosen: list[tuple[int, int]] = []
        for part in text.split(","):
            part = part.strip()
            m = re.fullmatch(r"([0-9]+)\s*-\s*([0-9]+)", part) or re.fullmatch(r"([0-9]+)", part)
            if not m:
                raise ValueError(f"cannot read step selection {part!r} (use e.g. 3 or 2-4 or 2,5)")
            if any(len(g) > 16 or int(g) > MAX_STEP for g in m.groups()):
                raise ValueError(f"step number in {part!r} is too large (steps run up to {MAX_STEP:,})")
            lo, hi = int(m.group(1)), int(m.groups()[-1])
            if hi < lo:
                raise ValueError(f"step range {part!r} runs backwards")
            chosen.append((lo, hi))
        return cls(_merged(chosen))

    def keeps(self, step: int) -> bool:
        return self.steps is None or any(lo <= step <= hi for lo, hi in self.steps)

    def mask(self, steps: Any) -> np.ndarray:
        """Which of these step numbers are selected (all, with no selection)."""
        values = np.asarray(steps, dtype=np.int64)
        if self.steps is None:
            return np.ones(values.shape, dtype=bool)
        out = np.zeros(values.shape, dtype=bool)
        for lo, hi in self.steps:
            out |= (values >= lo) & (values <= hi)
        return out

    def missing(self, present: Any) -> list[tuple[int, int]]:
        """The selected steps not among `present`, as ranges (nothing with no selection)."""
        if self.steps is None:
            return []
        have = np.unique(np.asarray(list(present), dtype=np.int64))
        out: list[tuple[int, int]] = []
        for lo, hi in self.steps:
            nxt = lo
            for v in have[(have >= lo) & (have <= hi)].tolist():
                if v > nxt:
                    out.append((nxt, v - 1))
                nxt = v + 1
            if nxt <= hi:
                out.append((nxt, hi))
        return out


def _merged(ranges: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def format_ranges(ranges: list[tuple[int, int]]) -> str:
    """[(1, 3), (5, 5)] -> '1-3, 5'."""
    return ", ".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges) or "none"


def format_steps(steps: list[int]) -> str:
    """[1, 2, 3, 5] -> '1-3, 5'."""
    vals = np.unique(np.asarray(list(steps), dtype=np.int64))
    if vals.size == 0:
        return "none"
    cuts = np.flatnonzero(np.diff(vals) != 1) + 1
    runs = np.split(vals, cuts)
    return ", ".join(str(r[0]) if r.size == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def check_step_selection(traces: TraceSet, selection: StepSelection, pattern: str = DEFAULT_STEP_PATTERN) -> None:
    """Refuse a selection naming a step that some rank's trace does not hold (UnknownStepsError,
    listing the steps present), so that no section silently measures nothing or everything."""
    if selection.steps is None:
        return
    for t in traces:
        present = gpu_step_windows(t, pattern)["step"].astype(int).tolist()
        missing = selection.missing(present)
        if not missing:
            continue
        where = f"{t.label} ({t.source})" if len(traces) > 1 else t.source
        if not present:
            raise UnknownStepsError(f"--steps {format_ranges(missing)}: {where} has no step ranges that launched GPU "
                                    "work (ProfilerStep#N, or ranges matching --step-pattern)")
        raise UnknownStepsError(f"--steps: step {format_ranges(missing)} not in {where}; "
                                f"steps present: {format_steps(present)}")


def select_step_rows(trace: RankTrace, selection: StepSelection, pattern: str = DEFAULT_STEP_PATTERN) -> RankTrace:
    """A copy of the trace whose GPU table keeps only the activity inside the selected steps' GPU
    windows (the whole trace when nothing is selected): what cross-rank analyses then see."""
    if selection.steps is None:
        return trace
    w = gpu_step_windows(trace, pattern)
    w = w[selection.mask(w["step"].to_numpy())]
    keep = iv.overlaps_any(trace.gpu["start_ns"], trace.gpu["end_ns"], w["gpu_start_ns"], w["gpu_end_ns"])
    return replace(trace, gpu=trace.gpu[keep].reset_index(drop=True))


# Step ranges are asked for by metrics, syncs, findings and cross-rank alike: computed once per
# (tables, pattern). Entries hold weak references to the tables they were made from, plus their
# length and start-time sum, so a table replaced, freed or changed is never matched.
_MEMO: dict[tuple, tuple[tuple, pd.DataFrame]] = {}
_MEMO_LIMIT = 512


def _stamp(frames: tuple[pd.DataFrame, ...]) -> tuple:
    return tuple((len(f), int(f["start_ns"].to_numpy().sum()) if len(f) else 0) for f in frames)


def _memoized(kind: str, pattern: str, frames: tuple[pd.DataFrame, ...], compute) -> pd.DataFrame:
    key = (kind, pattern, *map(id, frames))
    hit = _MEMO.get(key)
    stamp = _stamp(frames)
    if hit is not None and all(r() is f for r, f in zip(hit[0][0], frames, strict=True)) and hit[0][1] == stamp:
        return hit[1].copy()
    value = compute()
    if len(_MEMO) >= _MEMO_LIMIT:
        _MEMO.clear()
    _MEMO[key] = ((tuple(weakref.ref(f) for f in frames), stamp), value)
    return value.copy()


def host_steps(trace: RankTrace, pattern: str = DEFAULT_STEP_PATTERN) -> pd.DataFrame:
    """Host step ranges: columns step, name, host_start_ns, host_end_ns (sorted by start).

    The step number is the pattern's first group when it has one, else the order found.
    Duplicate step numbers (e.g. an NVTX range and a profiler op of the same name) keep the
    longest range.
    """
    require_host_tables(trace)
    return _memoized("host_steps", pattern, (trace.host_ops,), lambda: _host_steps(trace, pattern))


def _host_steps(trace: RankTrace, pattern: str) -> pd.DataFrame:
    ops = trace.host_ops
    cols = ["step", "name", "host_start_ns", "host_end_ns"]
    if ops.empty:
        return pd.DataFrame({c: [] for c in cols})
    name_ids = ops["name_id"].to_numpy()
    ids = np.sort(pd.unique(name_ids))
    names = trace.names_of(ids)
    found = each(pattern, "--step-pattern", names, lambda rx, n: rx.search(n))
    matched = {int(i): m for i, m in zip(ids, found, strict=True)}
    matched = {i: m for i, m in matched.items() if m}
    if not matched:
        return pd.DataFrame({c: [] for c in cols})
    hit = np.isin(name_ids, np.fromiter(matched, dtype=np.int64, count=len(matched)))
    first_group = {i: _step_number(m, trace) for i, m in matched.items()}
    # by start (stable); steps numbered in that order when some range's name gives no number
    by_start = np.argsort(ops["start_ns"].to_numpy()[hit], kind="stable")
    row_ids = name_ids[hit][by_start]
    start, end = ops["start_ns"].to_numpy()[hit][by_start], ops["end_ns"].to_numpy()[hit][by_start]
    numbers = [first_group[int(i)] for i in row_ids]
    step = (np.arange(row_ids.size, dtype=np.int64) if any(n is None for n in numbers)
            else np.asarray(numbers, dtype=np.int64))
    # one range per step number, the longest (the earlier on equal lengths), then by start
    by_dur = np.argsort(-(end - start), kind="stable")
    kept = by_dur[~pd.Series(step[by_dur]).duplicated(keep="first").to_numpy()]
    rows = kept[np.argsort(start[kept], kind="stable")]
    return pd.DataFrame({"step": step[rows], "name": trace.names_of(row_ids[rows]),
                         "host_start_ns": start[rows], "host_end_ns": end[rows]})[cols]


def _step_number(m: re.Match[str], trace: RankTrace) -> int | None:
    """The step number a range's name gives (group 1, ASCII digits); None when it gives none. A
    number past MAX_STEP is bad input, named with its file (it would overflow the int64 step column)."""
    text = m.group(1) if m.groups() else None
    if not text or not text.isascii() or not text.isdigit():
        return None
    if len(text) > 16 or int(text) > MAX_STEP:
        raise BadInputError(trace.source, f"step range {m.group(0)[:60]!r} has a step number too large "
                                          f"(steps run up to {MAX_STEP:,})")
    return int(text)


def launch_times(trace: RankTrace) -> np.ndarray:
    """Host start time of the runtime call that launched each GPU activity (NO_TIME if unknown)."""
    require_host_tables(trace)
    return _memoized("launch_times", "", (trace.runtime, trace.gpu), lambda: _launch_times(trace))


def _launch_times(trace: RankTrace) -> np.ndarray:
    gpu, rt = trace.gpu, trace.runtime
    out = np.full(len(gpu), NO_TIME, dtype=np.int64)
    if gpu.empty or rt.empty:
        return out
    corr = gpu["correlation"].to_numpy()
    rt_corr = rt["correlation"].to_numpy()
    valid = rt_corr >= 0
    rt_corr, rt_start = rt_corr[valid], rt["start_ns"].to_numpy()[valid]
    order = np.argsort(rt_corr, kind="stable")
    rt_corr, rt_start = rt_corr[order], rt_start[order]
    pos = np.searchsorted(rt_corr, corr)
    pos_c = np.clip(pos, 0, max(rt_corr.size - 1, 0))
    hit = (rt_corr.size > 0) & (corr >= 0)
    hit = hit & (rt_corr[pos_c] == corr) if rt_corr.size else np.zeros_like(corr, dtype=bool)
    out[hit] = rt_start[pos_c[hit]]
    return out


def assign_steps(trace: RankTrace, steps: pd.DataFrame) -> np.ndarray:
    """Step number of each GPU activity (-1 when its launch is outside every step)."""
    launched = launch_times(trace)
    out = np.full(len(trace.gpu), -1, dtype=np.int64)
    if steps.empty or len(out) == 0:
        return out
    hs = steps["host_start_ns"].to_numpy()
    he = steps["host_end_ns"].to_numpy()
    idx = np.searchsorted(hs, launched, side="right") - 1
    ok = (launched != NO_TIME) & (idx >= 0)
    idx_c = np.clip(idx, 0, len(hs) - 1)
    ok &= launched < he[idx_c]
    out[ok] = steps["step"].to_numpy()[idx_c[ok]]
    return out


def gpu_step_windows(trace: RankTrace, pattern: str = DEFAULT_STEP_PATTERN) -> pd.DataFrame:
    """Per step: step, name, host range, GPU window [gpu_start_ns, gpu_end_ns), activity count.

    Steps that launched no GPU work are left out (their window would be empty).
    """
    require_host_tables(trace)
    return _memoized("gpu_step_windows", pattern, (trace.host_ops, trace.runtime, trace.gpu),
                     lambda: _gpu_step_windows(trace, pattern))


def _gpu_step_windows(trace: RankTrace, pattern: str) -> pd.DataFrame:
    steps = host_steps(trace, pattern)
    cols = ["step", "name", "host_start_ns", "host_end_ns", "gpu_start_ns", "gpu_end_ns", "n_gpu"]
    if steps.empty:
        return pd.DataFrame({c: [] for c in cols})
    which = assign_steps(trace, steps)
    on = which >= 0
    if not on.any():
        return pd.DataFrame({c: [] for c in cols})
    # per step: first start, last end, activity count (rows grouped by one stable sort)
    gpu = trace.gpu
    order = np.argsort(which[on], kind="stable")
    w = which[on][order]
    heads = np.r_[0, np.flatnonzero(w[1:] != w[:-1]) + 1]
    agg_step = w[heads]
    agg_first = np.minimum.reduceat(gpu["start_ns"].to_numpy(np.int64)[on][order], heads)
    agg_last = np.maximum.reduceat(gpu["end_ns"].to_numpy(np.int64)[on][order], heads)
    agg_n = np.diff(np.r_[heads, w.size])
    # the steps that launched something, in step-table order, then by first start
    step_col = steps["step"].to_numpy(np.int64)
    keep = np.flatnonzero(np.isin(step_col, agg_step))
    at = np.searchsorted(agg_step, step_col[keep])
    by_first = np.argsort(agg_first[at], kind="stable")
    keep, at = keep[by_first], at[by_first]
    first = agg_first[at]
    end = agg_last[at].copy()  # int64 throughout: epoch-scale ns do not survive a float64 round trip
    end[:-1] = first[1:]
    return pd.DataFrame({"step": step_col[keep], "name": steps["name"].array.take(keep),
                         "host_start_ns": steps["host_start_ns"].to_numpy()[keep],
                         "host_end_ns": steps["host_end_ns"].to_numpy()[keep],
                         "gpu_start_ns": first, "gpu_end_ns": np.maximum(end, first),
                         "n_gpu": agg_n[at].astype(np.int64)})  # in the order of cols


def like_hta_mask(trace: RankTrace, pattern: str = DEFAULT_STEP_PATTERN) -> np.ndarray:
    """GPU rows HolisticTraceAnalysis keeps: launched before the last profiler step began.

    HTA drops kernels launched during the last ProfilerStep (it may be cut short) and any
    GPU activity whose launch is not in the trace. With fewer than two steps it keeps all.
    HTA takes "the last ProfilerStep" as the latest-starting event of that name that is not a GPU
    kernel, so a GPU-side ``gpu_user_annotation`` ProfilerStep (ROCm and CUDA traces carry them)
    that starts after the last host step moves the cut there; the Kineto loader records its start.
    """
    steps = host_steps(trace, pattern)
    n = len(trace.gpu)
    if len(steps) < 2:
        return np.ones(n, dtype=bool)
    last_start = np.int64(max(int(steps["host_start_ns"].max()),
                              _known_or(trace.meta.get("gpu_step_annotation_last_start_ns"), NO_TIME)))
    launched = launch_times(trace)
    if trace.meta.get("fractional_us_timestamps"):  # HTA compares µs-rounded times then
        last_start = _ceil_us(np.asarray([last_start]))[0]
        launched = np.where(launched != NO_TIME, _ceil_us(launched), NO_TIME)
    return (launched != NO_TIME) & (launched < last_start)


def _known_or(value: int | None, default: int) -> int:
    """value where it is a time (0 and negative times too), else default."""
    return default if value is None else int(value)


def _ceil_us(ns: np.ndarray) -> np.ndarray:
    return -(-np.asarray(ns, dtype=np.int64) // 1000) * 1000


def hta_rounded(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """HTA 0.5.0 shrinks every event to whole microseconds (start up, end down) before
    measuring (trace_parser.round_down_time_stamps); --like-hta reproduces that."""
    s = _ceil_us(starts)
    e = (np.asarray(ends, dtype=np.int64) // 1000) * 1000
    return s, np.maximum(e, s)
