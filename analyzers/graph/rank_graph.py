"""One rank's part of the dependency graph, built beside the parse (it needs the host tables).

Nodes are the rank's GPU activities (rows of its ``gpu`` table) and its host threads' segments.
A host segment is the run of a thread's runtime calls between two blocking syncs: inside it the
host's CPU time between calls is kept as measured offsets from the segment's start, and the
segment starts when the sync that opens it returns. Edges, all arrays over GPU rows:

- stream order: ``prev`` (the row before on the same device and stream);
- launch: ``seg`` / ``off`` (the launching call sits ``off`` ns into host segment ``seg``), plus
  the rank's launch latency;
- cross-stream event waits: ``dep`` (deps.event_waits);
- blocking syncs: ``sync_*`` arrays (deps.sync_targets): the call sits ``sync_off`` into
  ``sync_seg``, waits for GPU row ``sync_awaited`` and opens segment ``sync_opens``.

Collectives' cross-rank joins are added by set_graph (they need every rank). Everything here is
vectorized; the few Python loops run over threads, streams or devices.

Memory: indices and durations are int32 where every value fits (times stay int64), and the graph travels
from the per-rank stage, and stays in the caller, packed (PackedGraph: its arrays zstd-compressed, a
fraction of the bytes): the set graph unpacks one rank at a time and keeps only slim() of each.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import numpy as np
import pandas as pd
import pyarrow as pa

from analyzers.graph import deps
from analyzers.graph.dataflow import module_roles, roles_note
from analyzers.graph.et_roles import check_process, et_roles
from analyzers.graph.link_facts import message_bytes, rank_link_gbps
from analyzers.io.exec_trace import ExecTrace
from analyzers.timeline.constants import NO_TIME
from analyzers.timeline.iterations import assign_steps, host_steps
from analyzers.timeline.model import RankTrace, require_host_tables
from analyzers.timeline.sm_resources import kernel_resources

# Node categories (GPU rows): what an activity on the critical path is attributed to.
CAT_CODES = {"compute": 0, "comm": 1, "copy": 2, "memset": 3, "other": 4}


@dataclass
class RankGraph:
    """Arrays over one rank's GPU rows (gpu table order) and its host segments and syncs."""

    rank: int
    start: np.ndarray  # int64, own clock (measured)
    end: np.ndarray
    cat: np.ndarray  # int8, CAT_CODES
    stream: np.ndarray  # int64: stream code (device and stream) within the rank
    name_id: np.ndarray  # int64: index into names
    prev: np.ndarray  # int64: previous row on the same stream, -1
    seg: np.ndarray  # int64: host segment of the launching call, -1 unknown launch
    off: np.ndarray  # int64: the launching call's start, ns after its segment's start
    dep: np.ndarray  # int64: row this one waits for through a CUDA event, -1
    dep_lat: np.ndarray  # int64: ns from that row's end to this one's start (inferred edges; 0 recorded)
    step: np.ndarray  # int64: step number (launch inside step N's host range), -1
    seg_base: np.ndarray  # int64 per segment: measured start (own clock)
    seg_opened_by: np.ndarray  # int64 per segment: the sync that opens it, -1 (thread start)
    sync_seg: np.ndarray  # per blocking sync: segment of the call
    sync_off: np.ndarray  # the call's start, ns after that segment's start
    sync_awaited: np.ndarray  # GPU row it waited for, -1 none
    sync_lat: np.ndarray  # ns from max(call start, awaited end) to the return (measured)
    sync_dur: np.ndarray  # measured call duration
    sync_end: np.ndarray  # measured return (own clock): the replay's ordering key
    sync_after: np.ndarray  # (n, 2): (sync, first row launched after it on a stream of that device)
    launch_latency_ns: int
    turnaround_ns: int
    names: list[str]  # the GPU rows' names (for the critical path's labels)
    stream_labels: list[str]  # per stream code: "device D stream S"
    has_steps: bool
    notes: list[str] = field(default_factory=list)
    # SM residency (graph.residency): per row, its entry in res (-1 unknown); res: distinct entries
    res_id: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    res: np.ndarray = field(default_factory=lambda: np.zeros((0, 10), dtype=np.int64))
    # data dependencies from the CPU op tree (graph.dataflow): per row, its role and module (-1); module names
    role: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    module: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    modules: list[str] = field(default_factory=list)
    # the coalesce fix's link model (graph.coalesce): per row, its message's bytes (-1); the GPU's link peak
    msg_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    link_gbps: float = 0.0  # per direction, GB/s; 0 unknown

    @property
    def n(self) -> int:
        return len(self.start)

    def slim(self, start: np.ndarray, end: np.ndarray, cat: np.ndarray) -> RankGraph:
        """What the fixes read of the rank once the set graph holds its arrays: the JOINED fields are None (a
        reader fails loudly), start / end / cat are the given views of the set's arrays (aligned times: the
        fixes read only differences and overlaps of one rank's times), the per-row facts copied out of any
        packed buffer so that it can be freed."""
        kept = {f: getattr(self, f).copy() for f in SLIM_ARRAYS}
        return replace(self, start=start, end=end, cat=cat, **kept, **dict.fromkeys(JOINED))


# What build_set_graph copies into the set's arrays (RankGraph.slim drops them)
JOINED = ("prev", "seg", "off", "dep", "dep_lat", "step", "seg_base", "seg_opened_by", "sync_seg", "sync_off",
          "sync_awaited", "sync_lat", "sync_dur", "sync_end", "sync_after")
SLIM_ARRAYS = ("name_id", "stream", "res_id", "res", "role", "module", "msg_bytes")  # what the fixes read per row
# int64 always: ns timestamps, and what the fixes multiply (SM resources, message bytes); every other
# integer array is int32 where its values fit
WIDE = ("start", "end", "seg_base", "sync_end", "res", "msg_bytes")
_ARRAYS = tuple(f.name for f in fields(RankGraph) if f.type == "np.ndarray")


def narrowed(a: np.ndarray) -> np.ndarray:
    """a as int32 when it is an int64 array whose values all fit (indices, codes, durations), else a."""
    if a.dtype != np.int64 or not a.size:
        return a
    lo, hi = int(a.min()), int(a.max())
    return a.astype(np.int32) if lo >= np.iinfo(np.int32).min and hi <= np.iinfo(np.int32).max else a


class PackedGraph:
    """A RankGraph with its arrays in one zstd-compressed buffer (pyarrow's codec); the other fields as they
    are. n, n_seg and n_sync answer without unpacking; unpack() makes the RankGraph (read-only arrays)."""

    def __init__(self, g: RankGraph) -> None:
        arrays = {name: np.ascontiguousarray(getattr(g, name)) for name in _ARRAYS}
        self.layout = [(name, a.dtype.str, a.shape) for name, a in arrays.items()]
        raw = b"".join(a.tobytes() for a in arrays.values())
        self.raw_size = len(raw)
        self.packed = pa.compress(raw, codec="zstd", asbytes=True)
        self.rest = {f.name: getattr(g, f.name) for f in fields(RankGraph) if f.name not in arrays}
        self.n, self.n_seg, self.n_sync = g.n, len(g.seg_base), len(g.sync_seg)

    @property
    def rank(self) -> int:
        return self.rest["rank"]

    def unpack(self) -> RankGraph:
        raw = pa.decompress(self.packed, self.raw_size, codec="zstd", asbytes=True)
        arrays, at = {}, 0
        for name, dtype, shape in self.layout:
            dt = np.dtype(dtype)
            count = int(np.prod(shape, dtype=np.int64))
            arrays[name] = np.frombuffer(raw, dtype=dt, count=count, offset=at).reshape(shape)
            at += count * dt.itemsize
        return RankGraph(**arrays, **self.rest)


def unpacked(g: RankGraph | PackedGraph) -> RankGraph:
    return g.unpack() if isinstance(g, PackedGraph) else g


def _category_codes(gpu: pd.DataFrame) -> np.ndarray:
    col = gpu["category"]
    if isinstance(col.dtype, pd.CategoricalDtype):  # map the few categories, not every row's string
        table = np.asarray([CAT_CODES.get(str(c), CAT_CODES["other"]) for c in col.cat.categories] + [4],
                           dtype=np.int8)
        return table[col.cat.codes.to_numpy()]
    cat = col.astype(str).to_numpy()
    out = np.full(len(gpu), CAT_CODES["other"], dtype=np.int8)
    for name, code in CAT_CODES.items():
        out[cat == name] = code
    return out


def _stream_codes(device: np.ndarray, stream: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """A dense code per (device, stream), in sorted order, and the pairs."""
    if not len(device):
        return np.zeros(0, dtype=np.int64), []
    if stream.min() >= 0 and stream.max() < (1 << 40) and device.min() >= 0:
        uniq, inv = np.unique(device.astype(np.int64) * (1 << 40) + stream, return_inverse=True)
        return inv.astype(np.int64), [(int(u >> 40), int(u & ((1 << 40) - 1))) for u in uniq]
    codes, pairs = pd.factorize(pd.MultiIndex.from_arrays([device, stream]), sort=True)
    return codes.astype(np.int64), [(int(d), int(s)) for d, s in pairs]


def _launch_calls(trace: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    """Start (NO_TIME where unknown) and thread (-1) of the runtime call that launched each GPU row."""
    gpu, rt = trace.gpu, trace.runtime
    t = np.full(len(gpu), NO_TIME, dtype=np.int64)
    tid = np.full(len(gpu), -1, dtype=np.int64)
    if gpu.empty or rt.empty:
        return t, tid
    rc = rt["correlation"].to_numpy(np.int64)
    ok = rc >= 0
    order = np.argsort(rc[ok], kind="stable")
    rc_s = rc[ok][order]
    rs = rt["start_ns"].to_numpy(np.int64)[ok][order]
    rtid = rt["tid"].to_numpy(np.int64)[ok][order]
    corr = gpu["correlation"].to_numpy(np.int64)
    pos = np.clip(np.searchsorted(rc_s, corr), 0, max(len(rc_s) - 1, 0))
    hit = (corr >= 0) & (len(rc_s) > 0)
    if len(rc_s):
        hit &= rc_s[pos] == corr
    t[hit], tid[hit] = rs[pos[hit]], rtid[pos[hit]]
    return t, tid


def _stream_order(stream: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The previous row on the same stream (by start), -1 for each stream's first."""
    order = np.lexsort((np.arange(len(start)), start, stream))
    prev = np.full(len(start), -1, dtype=np.int64)
    same = stream[order][1:] == stream[order][:-1]
    prev[order[1:][same]] = order[:-1][same]
    return prev


def _segments(launch: np.ndarray, ltid: np.ndarray, syncs: pd.DataFrame
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Host segments: per thread, split at each blocking sync's return.

    Returns seg and off per GPU row, seg_base and seg_opened_by per segment, and the segment and
    offset of each sync's call (syncs in frame order)."""
    s_tid = syncs["tid"].to_numpy(np.int64)
    s_start = syncs["start_ns"].to_numpy(np.int64)
    s_end = syncs["end_ns"].to_numpy(np.int64)
    seg = np.full(len(launch), -1, dtype=np.int64)
    off = np.zeros(len(launch), dtype=np.int64)
    sync_seg = np.full(len(syncs), -1, dtype=np.int64)
    sync_off = np.zeros(len(syncs), dtype=np.int64)
    bases: list[np.ndarray] = []
    opened: list[np.ndarray] = []
    n_seg = 0
    threads = np.unique(np.r_[ltid[launch != NO_TIME], s_tid])
    for tid in threads.tolist():
        rows = np.flatnonzero((ltid == tid) & (launch != NO_TIME))
        srows = np.flatnonzero(s_tid == tid)
        srows = srows[np.argsort(s_end[srows], kind="stable")]
        ends = s_end[srows]
        k_rows = np.searchsorted(ends, launch[rows], side="right")  # syncs returned before the call
        k_sync = np.searchsorted(ends, s_start[srows], side="right")
        first = np.r_[launch[rows], s_start[srows]]
        base0 = int(first.min()) if len(first) else 0
        base = np.r_[base0, ends].astype(np.int64)  # segment k starts at sync k-1's return
        seg[rows] = n_seg + k_rows
        off[rows] = launch[rows] - base[k_rows]
        sync_seg[srows] = n_seg + k_sync
        sync_off[srows] = s_start[srows] - base[k_sync]
        bases.append(base)
        opened.append(np.r_[-1, srows].astype(np.int64))
        n_seg += len(base)
    seg_base = np.concatenate(bases) if bases else np.zeros(0, dtype=np.int64)
    seg_opened_by = np.concatenate(opened) if opened else np.zeros(0, dtype=np.int64)
    return seg, np.maximum(off, 0), seg_base, seg_opened_by, sync_seg, np.maximum(sync_off, 0)


def build_rank_graph(trace: RankTrace, syncs: pd.DataFrame, step_pattern: str,
                     et: ExecTrace | None = None) -> RankGraph:
    """The rank's graph from its tables and its blocking syncs (analyzers.syncs.blocking_syncs); et: the rank's
    Execution Trace, whose data dependencies replace the op tree's where it names them (graph.et_roles)."""
    require_host_tables(trace)
    gpu = trace.gpu
    notes: list[str] = []
    start = gpu["start_ns"].to_numpy(np.int64)
    end = np.maximum(gpu["end_ns"].to_numpy(np.int64), start)
    stream, uniq = _stream_codes(gpu["device"].to_numpy(np.int64), gpu["stream"].to_numpy(np.int64))
    labels = [f"device {d} stream {s}" for d, s in uniq]
    prev = _stream_order(stream, start)
    launch, ltid = _launch_calls(trace)
    if len(gpu) and (unknown := int((launch == NO_TIME).sum())):
        notes.append(f"rank {trace.rank}: {unknown} of {len(gpu)} GPU activities have no launching "
                     "call in the trace; they wait only for their stream (the first on a stream starts as measured)")
    syncs = syncs[syncs["end_ns"] > syncs["start_ns"]] if len(syncs) else syncs
    syncs = syncs[syncs["tid"].to_numpy() >= 0].reset_index(drop=True) if len(syncs) else syncs
    seg, off, seg_base, seg_opened_by, sync_seg, sync_off = _segments(launch, ltid, syncs)
    device = gpu["device"].to_numpy(np.int64)
    awaited, sync_lat = deps.sync_targets(syncs, start, end, device, stream, uniq, launch)
    lat_ns, turn_ns = deps.latencies(start, end, prev, launch)
    dep, dep_lat, waited, dep_note = deps.event_waits(trace, start, end, device, stream, uniq, launch, prev, lat_ns,
                                                      turn_ns)
    lat_ns, turn_ns = deps.latencies(start, end, prev, launch, waited)  # an idle wait set no start
    if dep_note:
        notes.append(f"rank {trace.rank}: {dep_note}")
    steps = host_steps(trace, step_pattern)
    step = assign_steps(trace, steps) if len(steps) else np.full(len(gpu), -1, dtype=np.int64)
    s_end = syncs["end_ns"].to_numpy(np.int64) if len(syncs) else np.zeros(0, dtype=np.int64)
    used, name_code = np.unique(gpu["name_id"].to_numpy(np.int64), return_inverse=True)
    res_id, res = kernel_resources(trace)
    role, module, modules = module_roles(trace.host_ops, trace.names, launch, ltid)
    if note := roles_note(trace.rank, trace.fmt, len(trace.host_ops), modules):
        notes.append(note)
    cat = _category_codes(gpu)
    if et is not None:
        check_process(et, trace.host_ops, trace.rank)
        windows = list(zip(steps["host_start_ns"].tolist(), steps["host_end_ns"].tolist(), strict=True))
        notes.append(f"rank {trace.rank}: " + et_roles(et, trace.host_ops, trace.names, launch, ltid, cat, CAT_CODES,
                                                       windows, role, module, modules))
    g = RankGraph(
        rank=trace.rank, start=start, end=end, cat=cat, stream=stream,
        name_id=name_code.astype(np.int64), prev=prev, seg=seg, off=off, dep=dep, dep_lat=dep_lat, step=step,
        seg_base=seg_base, seg_opened_by=seg_opened_by, sync_seg=sync_seg, sync_off=sync_off,
        sync_awaited=awaited, sync_lat=sync_lat,
        sync_dur=(s_end - syncs["start_ns"].to_numpy(np.int64)) if len(syncs) else np.zeros(0, dtype=np.int64),
        sync_end=s_end, sync_after=deps.rows_after_syncs(syncs, device, stream, launch, gpu["stream"].to_numpy()),
        launch_latency_ns=lat_ns, turnaround_ns=turn_ns, names=[str(x) for x in trace.names_of(used)],
        stream_labels=labels,
        has_steps=bool((step >= 0).any()), notes=notes, res_id=res_id, res=res, role=role, module=module,
        modules=modules, msg_bytes=message_bytes(gpu), link_gbps=rank_link_gbps(trace.devices))
    return replace(g, **{name: narrowed(getattr(g, name)) for name in _ARRAYS if name not in WIDE})
