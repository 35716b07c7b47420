"""The edges of a rank's graph that the trace does not state outright: what a blocking sync waited
for, which activity a cross-stream event wait waited for, and the rank's launch latency.

Traces record that a host sync returned and that a stream waited on an event, not which GPU
activity either waited for (Kineto leaves ``wait_on_cuda_event_record_corr_id`` at -1; CUDA event
records are not activities). The rules, each conservative (an edge is added only where the
measured times allow it, so it never contradicts the trace):

- a blocking sync waited for the latest-ending GPU activity launched before the call on its
  device (on its stream when the trace names the stream) that had ended when the call returned;
- a "Stream Wait Event" on stream S makes the first activity launched on S after the
  cudaStreamWaitEvent call wait for, of the last activities launched before that call on each
  other stream of the device, the latest-ending one that ended before it started. A source that had
  ended before the call was made imposed nothing in this run (the host was later than the GPU), but
  the order is the program's: a fix that makes the host earlier (launch-gaps, host-syncs) makes the
  wait bind again, so the edge is kept as an *idle* wait. It does not take its target out of the
  launch-latency sample (it set no start), and it replaces no inferred edge. A wait called inside a c10d
  collective call whose target is that call's kernel, on a stream that also runs work launched outside
  collective calls, is no edge: ProcessGroupNCCL's wait of the collective's stream on the caller's current
  stream, here the same stream (_own_stream_waits);
- an activity that started later than its stream, its launch and its recorded wait explain
  (by ``MIN_DELAY_NS`` or more) is taken to wait for the last activity of another stream of its
  device to start before it, if that one was still running or had ended at most ``EXPLAIN_NS``
  before: an unrecorded wait, or a GPU too full to start it sooner (a kernel that gets SMs in the
  tail of a large one). The edge keeps the measured start-minus-end as its latency (negative in
  the tail case), so a faster or slower source moves the target with it (a note counts them). The
  stream turnaround a delay is judged against is measured on the gaps no other stream could have set
  (_own_turnaround), so that GEMMs of two streams waiting for each other's SMs are not a "turnaround".
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzers.timeline import intervals as iv
from analyzers.timeline.constants import NO_TIME
from analyzers.timeline.model import RankTrace

# An edge's source may end this much after its target starts (clock rounding: Kineto µs).
TOL_NS = 1_000
# Without wait records: a start delay beyond what stream and launch explain of at least this ...
MIN_DELAY_NS = 5_000
# ... is explained by another stream's activity that ended at most this long before it.
EXPLAIN_NS = 20_000
WAIT_EVENT = "Stream Wait Event"


def _by_stream(stream: np.ndarray, key: np.ndarray, rows: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per stream code: its rows among `rows`, sorted by key, and the sorted keys."""
    out = {}
    st = stream[rows]
    for s in np.unique(st).tolist():
        r = rows[st == s]
        o = np.argsort(key[r], kind="stable")
        out[s] = (r[o], key[r][o])
    return out


def _stream_device(uniq: list[tuple[int, int]]) -> np.ndarray:
    return np.asarray([int(d) for d, _ in uniq], dtype=np.int64)


def sync_targets(syncs: pd.DataFrame, start: np.ndarray, end: np.ndarray, device: np.ndarray, stream: np.ndarray,
                 uniq: list[tuple[int, int]], launch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per blocking sync: the GPU row it waited for (-1) and its wake latency (see module docstring)."""
    n = len(syncs)
    awaited = np.full(n, -1, dtype=np.int64)
    best = np.full(n, NO_TIME, dtype=np.int64)
    if not n:
        return awaited, np.zeros(0, dtype=np.int64)
    t0 = syncs["start_ns"].to_numpy(np.int64)
    t1 = syncs["end_ns"].to_numpy(np.int64)
    s_dev = syncs["device"].to_numpy(np.int64)
    s_stream = syncs["stream"].to_numpy(np.int64)
    sdev = _stream_device(uniq)
    launched = np.flatnonzero(launch != NO_TIME)
    for s, (rows, keys) in _by_stream(stream, launch, launched).items():
        # running latest end by launch order, and the row holding it
        e = end[rows]
        run = np.maximum.accumulate(e)
        at = np.maximum.accumulate(np.where(e == run, np.arange(len(e)), 0))
        stream_id = int(uniq[s][1])
        mine = (s_dev == sdev[s]) & ((s_stream < 0) | (s_stream == stream_id))
        k = np.searchsorted(keys, t0, side="right") - 1
        ok = mine & (k >= 0)
        kc = np.maximum(k, 0)
        cand_end = np.where(ok, run[kc], NO_TIME)
        ok &= cand_end <= t1 + TOL_NS
        better = ok & (cand_end > best)
        best[better] = cand_end[better]
        awaited[better] = rows[at[kc[better]]]
    lat = np.where(awaited >= 0, t1 - np.maximum(t0, best), t1 - t0)
    return awaited, np.maximum(lat, 0)


def latencies(start: np.ndarray, end: np.ndarray, prev: np.ndarray, launch: np.ndarray,
              dep: np.ndarray | None = None) -> tuple[int, int]:
    """The rank's launch latency (median launch-to-start of activities launched onto an idle stream,
    waiting for no other stream) and stream turnaround (median gap between an activity queued behind
    another and that one's end)."""
    has = (launch != NO_TIME) & (dep < 0 if dep is not None else True)
    pe = np.where(prev >= 0, end[np.maximum(prev, 0)], np.iinfo(np.int64).min)
    idle = has & (launch >= pe)
    d = (start - launch)[idle]
    d = d[d >= 0]
    lat = int(np.median(d)) if len(d) else 0
    queued = has & (prev >= 0) & (launch + lat <= pe)
    g = (start - pe)[queued]
    g = g[g >= 0]
    turn = int(np.median(g)) if len(g) else 0
    return lat, turn


def _wait_calls(trace: RankTrace, stream_of: dict[tuple[int, int], int]) -> tuple[np.ndarray, np.ndarray]:
    """(stream code, host time of the cudaStreamWaitEvent call) of each recorded stream wait."""
    se = trace.sync_events
    none = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    if se.empty or trace.runtime.empty:
        return none
    names = trace.names_of(se["name_id"].to_numpy())
    picked = np.flatnonzero(names == WAIT_EVENT)
    if not len(picked):
        return none
    w = {col: se[col].to_numpy(np.int64)[picked] for col in ("correlation", "device", "stream")}
    rt = trace.runtime
    rc = rt["correlation"].to_numpy(np.int64)
    o = np.argsort(rc, kind="stable")
    rc_s, rs = rc[o], rt["start_ns"].to_numpy(np.int64)[o]
    c = w["correlation"]
    pos = np.clip(np.searchsorted(rc_s, c), 0, len(rc_s) - 1)
    hit = rc_s[pos] == c
    # a stream id found on one device only is that stream, whatever device the record names (nsys
    # exports may number the devices of sync records differently from those of kernels)
    ids = [s for _, s in stream_of]
    only = {s: c for (_, s), c in stream_of.items() if ids.count(s) == 1}
    code = _lookup(stream_of, w["device"], w["stream"])
    if only:
        by_id = pd.Index(list(only)).get_indexer(w["stream"])
        alt = np.asarray(list(only.values()), dtype=np.int64)[np.maximum(by_id, 0)]
        code = np.where((code < 0) & (by_id >= 0), alt, code)
    ok = hit & (code >= 0)
    return code[ok], rs[pos[ok]]


COLLECTIVE_CALLS = ("record_param_comms", "c10d::", "nccl:")


def _collective_calls(trace: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    """The host time ranges of the rank's c10d collective calls (PyTorch's ``record_param_comms``, ``c10d::*``,
    ``nccl:*`` ops), merged."""
    ops = trace.host_ops
    if ops is None or ops.empty:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    codes, uniques = pd.factorize(ops["name_id"].to_numpy(np.int64))
    hit = np.asarray([str(n).startswith(COLLECTIVE_CALLS) for n in trace.names_of(uniques)], dtype=bool)[codes]
    return iv.union(ops["start_ns"].to_numpy(np.int64)[hit], ops["end_ns"].to_numpy(np.int64)[hit])


def _own_stream_waits(calls: tuple[np.ndarray, np.ndarray], wait_t: np.ndarray, tgt_launch: np.ndarray,
                      stream_launches: np.ndarray) -> np.ndarray:
    """Per wait: ProcessGroupNCCL's wait of a collective's stream on the caller's current stream, where the
    two are one stream. Inside a collective call c10d records an event on the current stream and makes the
    collective's stream wait for it; where the call launched its kernel onto a stream that also runs work
    launched outside collective calls (the caller's compute), that stream is the current one and the wait
    orders nothing. The trace does not say on which stream the event was recorded: without this the wait
    is tied to another stream's last activity (a GEMM the collective never waited for)."""
    lo, hi = calls
    if not len(lo) or not len(wait_t) or (_call_index(lo, hi, stream_launches) >= 0).all():
        return np.zeros(len(wait_t), dtype=bool)  # no calls, or the stream runs collectives only (its own)
    call = _call_index(lo, hi, wait_t)
    return (call >= 0) & (call == _call_index(lo, hi, tgt_launch))


def _call_index(lo: np.ndarray, hi: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per time: the (merged, sorted) call range that holds it, -1."""
    j = np.searchsorted(lo, t, side="right") - 1
    return np.where((j >= 0) & (t <= hi[np.maximum(j, 0)]), j, -1)


def _lookup(codes: dict[tuple[int, int], int], device: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """codes[(device, stream)] per pair, -1 where absent (one vectorized look-up, not one per record)."""
    if not codes or not len(device):
        return np.full(len(device), -1, dtype=np.int64)
    pos = pd.MultiIndex.from_tuples(list(codes)).get_indexer(pd.MultiIndex.from_arrays([device, stream]))
    return np.where(pos >= 0, np.asarray(list(codes.values()), dtype=np.int64)[np.maximum(pos, 0)], -1)


def _own_turnaround(start: np.ndarray, end: np.ndarray, prev: np.ndarray, launch: np.ndarray, lat: int,
                    device: np.ndarray, stream: np.ndarray, turn: int) -> int:
    """The stream turnaround that start delays are judged against: the median gap between a queued activity
    and its predecessor's end, over the gaps no other stream could have set. A gap inside which an activity of
    another stream of the device ended (or as long after its start as the gap is long: a kernel that got SMs
    in the tail of one that held the GPU) may be a wait on that stream, recorded or not: counted, a rank whose
    GEMMs on two streams wait for each other's SMs had a "turnaround" of 600 µs that explained those waits
    away. `turn` (every queued gap) where no gap is left."""
    queued = (launch != NO_TIME) & (prev >= 0)
    pe = end[np.maximum(prev, 0)]
    queued &= launch + lat <= pe
    rows = np.flatnonzero(queued & (start >= pe))
    if not len(rows):
        return turn
    lo, hi = pe[rows], 2 * start[rows] - pe[rows]  # the window (lo, hi]
    others = np.zeros(len(rows), dtype=np.int64)
    for d in np.unique(device[rows]).tolist():
        on_d = np.sort(end[device == d])
        sel = device[rows] == d
        others[sel] = np.searchsorted(on_d, hi[sel], side="right") - np.searchsorted(on_d, lo[sel], side="right")
    for s in np.unique(stream[rows]).tolist():
        on_s = np.sort(end[stream == s])
        sel = stream[rows] == s
        others[sel] -= np.searchsorted(on_s, hi[sel], side="right") - np.searchsorted(on_s, lo[sel], side="right")
    g = (start - pe)[rows[others == 0]]
    return int(np.median(g)) if len(g) else turn


def event_waits(trace: RankTrace, start: np.ndarray, end: np.ndarray, device: np.ndarray, stream: np.ndarray,
                uniq: list[tuple[int, int]], launch: np.ndarray, prev: np.ndarray, lat: int, turn: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """dep per GPU row (-1), the edge's latency (start minus the source's end: negative where the
    activity started in the tail of the one that held the GPU), dep less its idle waits (the edges
    that may have set their target's start), and a note on how they were found."""
    dep = np.full(len(start), -1, dtype=np.int64)
    dep_end = np.full(len(start), NO_TIME, dtype=np.int64)
    idle_dep = np.full(len(start), -1, dtype=np.int64)  # recorded waits whose source had ended before the call
    idle_end = np.full(len(start), NO_TIME, dtype=np.int64)
    launched = np.flatnonzero(launch != NO_TIME)
    if not len(launched) or len(uniq) < 2:
        return dep, np.zeros(len(start), dtype=np.int64), dep.copy(), ""
    sdev = _stream_device(uniq)
    per = _by_stream(stream, launch, launched)
    stream_of = {(int(d), int(s)): i for i, (d, s) in enumerate(uniq)}
    w_code, w_time = _wait_calls(trace, stream_of)
    calls = _collective_calls(trace)
    for s, (rows, keys) in per.items():
        sel = w_code == s
        if not sel.any():
            continue
        k = np.searchsorted(keys, w_time[sel], side="right")  # first launched after the call
        ok = k < len(rows)
        tgt = rows[k[ok]]
        wt = w_time[sel][ok]
        own = _own_stream_waits(calls, wt, launch[tgt], launch[rows])
        tgt, wt = tgt[~own], wt[~own]
        for x, (xrows, xkeys) in per.items():
            if x == s or sdev[x] != sdev[s]:
                continue
            j = np.searchsorted(xkeys, wt, side="left") - 1  # last launched before the call
            good = j >= 0
            src = xrows[np.maximum(j, 0)]
            good &= end[src] <= start[tgt] + TOL_NS
            # a source that had ended before the wait was even called imposed nothing in this run: idle
            idle = good & (end[src] <= wt) & (end[src] > idle_end[tgt])
            idle_dep[tgt[idle]], idle_end[tgt[idle]] = src[idle], end[src[idle]]
            good &= (end[src] > dep_end[tgt]) & (end[src] > wt)
            dep[tgt[good]], dep_end[tgt[good]] = src[good], end[src[good]]
    n_recorded = int((dep >= 0).sum())
    turn = _own_turnaround(start, end, prev, launch, lat, device, stream, turn)
    # start delays that stream order, launch and recorded waits leave unexplained
    pe = np.where(prev >= 0, end[np.maximum(prev, 0)] + turn, np.iinfo(np.int64).min)
    ready = np.maximum(np.maximum(pe, np.where(launch != NO_TIME, launch + lat, NO_TIME)), dep_end)
    late = np.flatnonzero((launch != NO_TIME) & (start - ready >= MIN_DELAY_NS))
    dep_lat = np.zeros(len(start), dtype=np.int64)
    inferred = np.zeros(len(start), dtype=bool)
    if len(late):
        starts = _by_stream(stream, start, np.arange(len(start)))
        for x, (xrows, xstart) in starts.items():
            tgt = late[(stream[late] != x) & (device[late] == sdev[x])]
            j = np.searchsorted(xstart, start[tgt], side="left") - 1  # the last to start before it
            good = j >= 0
            src = xrows[np.maximum(j, 0)]
            good &= (end[src] >= start[tgt] - EXPLAIN_NS) & (end[src] > dep_end[tgt])
            dep[tgt[good]], dep_end[tgt[good]] = src[good], end[src[good]]
            dep_lat[tgt[good]] = start[tgt[good]] - end[src[good]]
            inferred[tgt[good]] = True
    n = int((dep >= 0).sum()) - n_recorded
    waited = dep.copy()
    # an idle wait on a later-ending source than the recorded edge's (or where there is none) is the edge
    idle = (idle_dep >= 0) & ((dep < 0) | (~inferred & (idle_end > dep_end)))
    dep[idle] = idle_dep[idle]
    if not n:
        return dep, dep_lat, waited, ""
    how = "the trace records no stream waits" if not len(w_code) else f"{n_recorded} from recorded stream waits"
    return dep, dep_lat, waited, (
        f"{how}; {n} cross-stream dependencies were inferred from start delays that stream order, launch and "
        "recorded waits do not explain (another stream's activity ended just before: the GPU was full or a wait was "
        "not recorded)")


def rows_after_syncs(syncs: pd.DataFrame, device: np.ndarray, stream: np.ndarray, launch: np.ndarray,
                     stream_id: np.ndarray) -> np.ndarray:
    """(sync, row) pairs: per blocking sync, the first activity launched after the call on the synced
    stream, or on each stream of its device for a device-wide sync (or one whose stream is unknown):
    where the host-syncs fix keeps the GPU-side order as an event wait."""
    if not len(syncs):
        return np.zeros((0, 2), dtype=np.int64)
    t0 = syncs["start_ns"].to_numpy(np.int64)
    s_dev = syncs["device"].to_numpy(np.int64)
    s_stream = syncs["stream"].to_numpy(np.int64)
    out = []
    for _, (rows, keys) in _by_stream(stream, launch, np.flatnonzero(launch != NO_TIME)).items():
        k = np.searchsorted(keys, t0, side="right")
        ok = (k < len(rows)) & (s_dev == device[rows[0]]) & ((s_stream < 0) | (s_stream == stream_id[rows[0]]))
        out.append(np.column_stack([np.flatnonzero(ok), rows[k[ok]]]))
    return np.concatenate(out).astype(np.int64) if out else np.zeros((0, 2), dtype=np.int64)
