"""Blocking host syncs: where the host waited for the GPU, what it cost the GPU, and who called it.

Why it is built this way:

- Syncs are classified by API name, never by the GPU-side sync record's type: nsys versions
  mislabel syncType (a cudaDeviceSynchronize shows up as "Event Sync"). The GPU-side records
  (Kineto ``cuda_sync``, nsys SYNCHRONIZATION) only confirm a call, joined on correlation id.
- cudaStreamWaitEvent makes a *stream* wait, not the host: it is never a blocking sync.
- A synchronous cudaMemcpy blocks the host for its own copy in any case; it is a *sync* (it made
  the host wait for other GPU work) only when work launched before it was still unfinished on
  its device. A device-to-device cudaMemcpy does not block the host at all.
- Ops that imply a sync (aten::item, aten::_local_scalar_dense, aten::nonzero, .cpu() copies)
  are reported through the runtime sync inside them, once, with the op as its caller. An op
  with no runtime sync inside is reported on its own only when the trace has no runtime table
  (otherwise it ran on CPU tensors and did not sync).
- GPU idle caused (DESIGN.md, Host syncs): the time with nothing running on the sync's device
  from the sync's end until the next GPU activity launched after it starts, once the work queued
  before the sync has drained (idle while queued work waits on its own dependencies, e.g. a
  collective waiting for a peer, is not the host's doing). A sync causes idle only when the GPU
  still had queued work when the call began: one that returns at once because the GPU had
  already drained did not hold the host back, and the gap after it belongs to whatever made the
  host late (launch-bound-gaps). A sync after which nothing is launched caused no idle (nothing
  was waiting to run: the trace simply ends), and the profiler's own closing sync, after the last
  step range, is never charged.

Everything is vectorized: searchsorted / merge_asof joins and prefix sums on int64 arrays; the
only Python loops run over devices and host-range nesting depths, never over rows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analyzers.syncs.device_busy import _device_timelines, _sync_devices
from analyzers.syncs.lookups import Distinct, PerName, as_float, first_by_key
from analyzers.syncs.nesting import RangeIndex, innermost_enclosing
from analyzers.timeline.constants import NO_TIME
from analyzers.timeline.iterations import DEFAULT_STEP_PATTERN, host_steps
from analyzers.timeline.model import RankTrace, require_host_tables
from analyzers.timeline.user_regex import search_each

# API name (version / per-thread suffixes stripped) -> sync kind.
DEFAULT_SYNC_APIS: dict[str, str] = {
    "cudaStreamSynchronize": "stream",
    "cudaDeviceSynchronize": "device",
    "cudaThreadSynchronize": "device",
    "cudaEventSynchronize": "event",
    "cuStreamSynchronize": "stream",
    "cuCtxSynchronize": "device",
    "cuEventSynchronize": "event",
}
# HIP (ROCm traces name HIP calls in the cuda_runtime category).
DEFAULT_SYNC_APIS.update({
    "hipStreamSynchronize": "stream",
    "hipDeviceSynchronize": "device",
    "hipEventSynchronize": "event",
})
# Synchronous (host-blocking) copies; the *Async forms are not.
DEFAULT_BLOCKING_MEMCPY_APIS: tuple[str, ...] = (
    "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol",
    "cudaMemcpyToArray", "cudaMemcpyFromArray",
    "cuMemcpy", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpy2D", "cuMemcpy3D",
    "hipMemcpy", "hipMemcpyWithStream", "hipMemcpy2D", "hipMemcpy3D", "hipMemcpyDtoH", "hipMemcpyHtoD",
)
# Runtime categories whose calls this module can judge (CUDA and HIP API names). A trace whose
# runtime calls all come from another device's runtime (MTIA, XPU, a PrivateUse1 backend) has
# sync APIs we do not know: its syncs cannot be judged, and none are reported.
JUDGED_RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "runtime"})
# Host ops that imply a sync whenever they run on a CUDA tensor.
DEFAULT_IMPLIED_SYNC_OPS: tuple[str, ...] = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero")
# Ops that sync only when a blocking runtime call runs inside them (.cpu() / .to("cpu")); they are
# never reported on their own, only named as callers.
DEFAULT_COPY_SYNC_OPS: tuple[str, ...] = ("aten::to", "aten::_to_copy", "aten::copy_")


_API_SUFFIX = re.compile(r"(?:_ptsz|_ptds)?(?:_v\d+)?(?:_ptsz|_ptds)?$")
# nsys NVTX names of PyTorch ops carry ", seq = N, op_id = N, sizes = ..." after the op name.
_OP_NAME = re.compile(r"^([^,(]+)")
_OP_LIKE = re.compile(r"^[A-Za-z_]\w*::\w+(?:$|,|\s|\()")  # "aten::copy_, op_id = 9"
ANNOTATION_KINDS = ("user_annotation", "nvtx", "gpu_user_annotation")
FRAME_KINDS = ("python_function", "python")

SYNC_COLUMNS = [
    "rank", "api", "kind", "start_ns", "end_ns", "host_blocked_ns", "gpu_idle_ns", "next_gpu_start_ns",
    "device", "stream", "pid", "tid", "correlation", "confirmed", "caller", "sync_op", "annotation",
    "frame", "step",
]


@dataclass(frozen=True)
class SyncParams:
    """What counts as a blocking sync. Defaults follow DESIGN.md (Host syncs)."""

    sync_apis: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_SYNC_APIS))
    """Runtime/driver API name -> kind ("stream" | "device" | "event"); always blocking."""
    blocking_memcpy_apis: tuple[str, ...] = DEFAULT_BLOCKING_MEMCPY_APIS
    """Synchronous copy APIs; blocking unless their copy is device-to-device."""
    memcpy_needs_pending_work: bool = True
    """A synchronous copy counts as a sync only when it made the host wait for other GPU work: work
    launched before it was still running on its device when it was called, and the call returned
    only after its own copy ended. Otherwise it is just a copy (False: every synchronous copy)."""
    implied_sync_ops: tuple[str, ...] = DEFAULT_IMPLIED_SYNC_OPS
    """Host ops that imply a sync; reported alone only when the trace has no runtime table."""
    copy_sync_ops: tuple[str, ...] = DEFAULT_COPY_SYNC_OPS
    """Host ops that sync only with a blocking runtime call inside (named as callers)."""
    step_pattern: str = DEFAULT_STEP_PATTERN
    """Host ranges that are iterations: they give the ``step`` column and are never a caller."""


def api_base_name(name: str) -> str:
    """'cudaStreamSynchronize_v3020' -> 'cudaStreamSynchronize' (nsys version / ptsz suffixes)."""
    return _API_SUFFIX.sub("", name)


def op_base_name(name: str) -> str:
    """'aten::item, seq = 3, op_id = 9' (nsys emit_nvtx) -> 'aten::item'."""
    m = _OP_NAME.match(name)
    return m.group(1).strip() if m else name


def syncs_not_judged(trace: RankTrace) -> str | None:
    """Why this rank's host syncs cannot be judged (another device's runtime), else None."""
    cats = trace.meta.get("runtime_categories")
    if not cats or any(c in JUDGED_RUNTIME_CATEGORIES for c in cats):
        return None
    return (f"runtime calls are {', '.join(cats)}: blocking host syncs cannot be judged on this device "
            "(only CUDA and HIP sync APIs are known), so none are reported")


def empty_syncs() -> pd.DataFrame:
    """The blocking_syncs frame with no rows (typed columns, so callers can concat / filter)."""
    ints = {"rank", "start_ns", "end_ns", "host_blocked_ns", "gpu_idle_ns", "next_gpu_start_ns", "device",
            "stream", "pid", "tid", "correlation", "step"}
    data = {c: (np.zeros(0, dtype=np.int64) if c in ints else np.zeros(0, dtype=object)) for c in SYNC_COLUMNS}
    data["confirmed"] = np.zeros(0, dtype=bool)
    return pd.DataFrame(data)[SYNC_COLUMNS]

# ------------------------------------------------------------------------------------------


def blocking_syncs(trace: RankTrace, params: SyncParams | None = None) -> pd.DataFrame:
    """One row per blocking host sync of the rank (columns: SYNC_COLUMNS), sorted by start.

    host_blocked_ns: how long the host call (or, without runtime, the op) lasted.
    gpu_idle_ns: idle time on the sync's device from the sync's end until the next GPU activity
    launched after it starts, counted only once the work launched before the sync has finished
    (a host far ahead of the GPU is not blocked by a sync that returns at once), and only when
    that device still had queued work when the call began (a sync on a drained GPU blocked
    nothing). 0 when nothing is launched after it (next_gpu_start_ns NO_TIME, null in the document) and for a sync that
    starts after the last step range ended (the profiler's closing sync).
    caller: innermost enclosing host op / annotation on the same thread, else on any thread
    (iteration ranges excluded); sync_op: the sync-implying op around it (aten::item, ...);
    annotation / frame: the innermost enclosing annotation (record_function, NVTX) / Python frame.
    """
    params = params or SyncParams()
    if syncs_not_judged(trace):
        return empty_syncs()
    require_host_tables(trace)
    rt, ops = trace.runtime, trace.host_ops

    # --- runtime syncs -----------------------------------------------------------------
    # Per distinct API name: its base name and sync kind ("memcpy" for a synchronous copy).
    rt_ids = PerName(trace, rt["name_id"].to_numpy())
    api_u = rt_ids.distinct(api_base_name)
    sync_apis, memcpy_apis = dict(params.sync_apis), set(params.blocking_memcpy_apis)
    kind_u = np.array([sync_apis.get(a) for a in api_u], dtype=object)
    kind_u = np.where(np.array([a in memcpy_apis for a in api_u], dtype=bool), "memcpy", kind_u).astype(object)
    cand = np.flatnonzero(pd.notna(kind_u)[rt_ids.codes])
    r_start = rt["start_ns"].to_numpy(np.int64)[cand]
    r_end = rt["end_ns"].to_numpy(np.int64)[cand]
    r_corr = rt["correlation"].to_numpy(np.int64)[cand]
    r_pid = rt["pid"].to_numpy(np.int64)[cand]
    r_tid = rt["tid"].to_numpy(np.int64)[cand]
    r_kind = kind_u[rt_ids.codes[cand]].astype(object)
    r_api = api_u[rt_ids.codes[cand]].astype(object)

    gpu = trace.gpu
    g_corr = gpu["correlation"].to_numpy()
    # Device-to-device (and peer) synchronous copies never block the host.
    if r_kind.size and (r_kind == "memcpy").any() and not gpu.empty:
        dtod_rx = re.compile(r"DtoD|PtoP")
        g_dtod = PerName(trace, gpu["name_id"].to_numpy()).rows(lambda n: bool(dtod_rx.search(n)), bool)
        row = first_by_key(g_corr, r_corr)
        is_dtod = (row >= 0) & g_dtod[np.clip(row, 0, None)]
        keep = ~((r_kind == "memcpy") & is_dtod)
        r_start, r_end, r_corr, r_pid, r_tid, r_kind, r_api = (
            a[keep] for a in (r_start, r_end, r_corr, r_pid, r_tid, r_kind, r_api))

    devices = _sync_devices(trace, r_start, r_corr, r_pid)
    timelines = _device_timelines(trace) if not gpu.empty else {}
    if params.memcpy_needs_pending_work and (r_kind == "memcpy").any():
        pending = np.zeros(r_start.size, dtype=bool)
        for d, tl in timelines.items():
            m = devices == d
            pending[m] = tl.pending_at(r_start[m])
        # A pageable host-to-device copy returns once its data is staged, often before its GPU
        # copy even starts: then the host did not wait for the GPU at all.
        copy_end = as_float(gpu["end_ns"].to_numpy(), first_by_key(g_corr, r_corr))
        waited = np.isnan(copy_end) | (r_end >= np.nan_to_num(copy_end))
        keep = (r_kind != "memcpy") | (pending & waited)
        r_start, r_end, r_corr, r_pid, r_tid, r_kind, r_api, devices = (
            a[keep] for a in (r_start, r_end, r_corr, r_pid, r_tid, r_kind, r_api, devices))

    # --- host ops: callers, implied syncs -------------------------------------------
    o_start = ops["start_ns"].to_numpy(np.int64)
    o_end = ops["end_ns"].to_numpy(np.int64)
    o_tid = ops["tid"].to_numpy(np.int64)
    # Per distinct op name: base name, full name and what it is (the rows index these by code).
    op_ids = PerName(trace, ops["name_id"].to_numpy())
    base_u = op_ids.distinct(op_base_name)
    full_u = op_ids.distinct(lambda n: n)
    o_code = op_ids.codes

    def of_names(values: np.ndarray) -> np.ndarray:
        return values[o_code] if len(ops) else np.zeros(0, dtype=values.dtype)

    def per_op(fn) -> np.ndarray:
        return of_names(np.array([bool(fn(b, f)) for b, f in zip(base_u, full_u, strict=True)], dtype=bool))

    not_step = ~of_names(search_each(params.step_pattern, full_u, "--step-pattern"))
    implied = per_op(lambda b, f: b in params.implied_sync_ops) & not_step

    # Ops with no runtime sync inside are syncs of their own only when the trace lacks runtime.
    op_rows = np.zeros(0, dtype=np.int64)
    if rt.empty and implied.any():
        imp = np.flatnonzero(implied)
        # Report the innermost implied op only (aten::item wraps aten::_local_scalar_dense).
        outer = innermost_enclosing(o_start[imp], o_end[imp], o_tid[imp], o_start[imp], o_end[imp], o_tid[imp],
                                    np.arange(imp.size))
        op_rows = imp[~np.isin(np.arange(imp.size), outer[outer >= 0])]

    n_rt, n_op = r_start.size, op_rows.size
    start = np.r_[r_start, o_start[op_rows]].astype(np.int64)
    end = np.r_[r_end, o_end[op_rows]].astype(np.int64)
    tid = np.r_[r_tid, o_tid[op_rows]].astype(np.int64)
    pid = np.r_[r_pid, ops["pid"].to_numpy(np.int64)[op_rows]].astype(np.int64)
    if n_op:
        devices = np.r_[devices, _sync_devices(trace, o_start[op_rows], np.full(n_op, -1), pid[n_rt:])]
    api = np.r_[r_api, of_names(base_u)[op_rows]].astype(object)
    kinds = np.r_[r_kind, np.full(n_op, "op", dtype=object)].astype(object)
    corr = np.r_[r_corr, np.full(n_op, -1, dtype=np.int64)]
    if start.size == 0:
        return empty_syncs()
    own = np.r_[np.full(n_rt, -1, dtype=np.int64), op_rows]  # an op row's own host op

    # host ops sorted once; each question below is a subset of them (innermost range around a sync)
    ranges = RangeIndex(o_start, o_end, o_tid)

    def enclosing(mask: np.ndarray, any_thread: bool) -> np.ndarray:
        """Index into host_ops of the innermost range of `mask` around each sync (-1 none)."""
        if not mask.any():
            return np.full(start.size, -1, dtype=np.int64)
        return ranges.innermost(start, end, tid, own, mask=mask, any_thread=any_thread)

    caller_idx = enclosing(not_step, any_thread=True)
    sync_op_names = set(params.implied_sync_ops) | set(params.copy_sync_ops)
    sync_op_idx = enclosing(per_op(lambda b, f: b in sync_op_names) & not_step, any_thread=False)
    # nsys NVTX ranges include PyTorch's op ranges (emit_nvtx): those are ops, not annotations.
    op_like = per_op(lambda b, f: _OP_LIKE.match(f))
    o_kind = Distinct(ops["kind"]) if "kind" in ops else None

    def kind_in(kinds: tuple[str, ...]) -> np.ndarray:
        return o_kind.isin(kinds) if o_kind is not None else np.zeros(len(ops), dtype=bool)

    ann_idx = enclosing(kind_in(ANNOTATION_KINDS) & not_step & ~(kind_in(("nvtx",)) & op_like), any_thread=False)
    frame_idx = enclosing(kind_in(FRAME_KINDS), any_thread=False)

    def label(idx: np.ndarray, names: np.ndarray) -> np.ndarray:
        if not len(ops):
            return np.where(idx >= 0, "", "")
        return np.where(idx >= 0, names[o_code[np.clip(idx, 0, len(ops) - 1)]], "")

    sync_op = label(sync_op_idx, base_u)
    sync_op[n_rt:] = of_names(base_u)[op_rows]

    # --- step ------------------------------------------------------------------------
    steps = host_steps(trace, params.step_pattern)
    step = np.full(start.size, -1, dtype=np.int64)
    after_last_step = np.zeros(start.size, dtype=bool)
    if not steps.empty:
        hs, he = steps["host_start_ns"].to_numpy(np.int64), steps["host_end_ns"].to_numpy(np.int64)
        i = np.searchsorted(hs, start, side="right") - 1
        ic = np.clip(i, 0, hs.size - 1)
        ok = (i >= 0) & (start < he[ic])
        step[ok] = steps["step"].to_numpy(np.int64)[ic[ok]]
        after_last_step = start >= int(he.max())

    # --- GPU idle caused --------------------------------------------------------------
    idle = np.zeros(start.size, dtype=np.int64)
    nxt = np.full(start.size, NO_TIME, dtype=np.int64)
    for d, tl in timelines.items():
        m = devices == d
        ns = tl.next_start_launched_from(end[m])
        nxt[m] = ns
        # Idle counts once the work queued before the sync has finished: until then the GPU had
        # work, and any gap is that work waiting on its own dependencies, not on the host. It
        # counts only for a sync that found queued work (one on a drained GPU blocked nothing)
        # and that something was launched after (else the trace just ends: no idle was caused).
        charged = tl.pending_at(start[m]) & (ns != NO_TIME) & ~after_last_step[m]
        idle[m] = np.where(charged, tl.idle_between(tl.drained_at(end[m]), ns), 0)

    # --- GPU-side confirmation and stream ---------------------------------------------
    se = trace.sync_events
    stream = np.full(start.size, -1, dtype=np.int64)
    confirmed = np.zeros(start.size, dtype=bool)
    if not se.empty:
        blocking_rec = PerName(trace, se["name_id"].to_numpy()).rows(lambda n: n != "Stream Wait Event", bool)
        # (a stream-side wait confirms nothing)
        found = as_float(se["stream"].to_numpy()[blocking_rec],
                         first_by_key(se["correlation"].to_numpy()[blocking_rec], corr))
        confirmed = ~np.isnan(found) & (corr >= 0)
        stream = np.where(confirmed, np.nan_to_num(found, nan=-1), -1).astype(np.int64)
        stream = np.where(stream == 0xFFFFFFFF, -1, stream)
    if (kinds == "memcpy").any() and not gpu.empty:
        found = as_float(gpu["stream"].to_numpy(), first_by_key(g_corr, corr))
        fill = (kinds == "memcpy") & ~np.isnan(found)
        stream[fill] = found[fill].astype(np.int64)

    columns = {
        "rank": np.full(start.size, trace.rank, dtype=np.int64),
        "api": api, "kind": kinds, "start_ns": start, "end_ns": end,
        "host_blocked_ns": np.maximum(end - start, 0), "gpu_idle_ns": idle, "next_gpu_start_ns": nxt,
        "device": devices.astype(np.int64), "stream": stream, "pid": pid, "tid": tid, "correlation": corr,
        "confirmed": confirmed, "caller": label(caller_idx, base_u), "sync_op": sync_op,
        "annotation": label(ann_idx, full_u), "frame": label(frame_idx, full_u), "step": step,
    }
    by_start = np.argsort(start, kind="stable")  # what sort_values("start_ns", kind="stable") does
    return pd.DataFrame({c: columns[c][by_start] for c in SYNC_COLUMNS})


def sync_totals_beyond_span(trace: RankTrace, syncs: pd.DataFrame) -> list[str]:
    """Sanity check: notes for any device whose syncs' GPU idle, or thread whose host time blocked,
    adds up to more than the rank's trace span. Neither can happen unless sync records overlap
    (e.g. runtime calls recorded twice); then the sync figures of that rank are not to be trusted.
    """
    require_host_tables(trace)
    tables = [tab for tab in (trace.gpu, trace.runtime, trace.host_ops) if not tab.empty]
    if syncs.empty or not tables:
        return []
    span = max(int(t["end_ns"].max()) for t in tables) - min(int(t["start_ns"].min()) for t in tables)
    notes = []
    idle = syncs.groupby("device")["gpu_idle_ns"].sum()
    blocked = syncs.groupby("tid")["host_blocked_ns"].sum()
    for what, totals in (("GPU idle on device", idle), ("host time blocked on thread", blocked)):
        for key, total in totals[totals > span].items():
            notes.append(f"rank {trace.rank}: blocking syncs' {what} {key} adds up to {int(total) / 1e6:.3f} ms, "
                         f"more than the trace's span ({span / 1e6:.3f} ms): sync records overlap (calls "
                         "recorded twice?), so this rank's sync figures are unreliable")
    return notes
