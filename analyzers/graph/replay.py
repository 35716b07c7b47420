"""Replay: a discrete-event simulation of the set's graph from durations and dependencies.

Each GPU activity starts when the last of its inputs is ready: its stream's previous activity
(plus the rank's stream turnaround), its launching call (the call's host time plus the rank's
launch latency), the activity a CUDA event made it wait for; a collective's transfer starts when
its last rank has arrived (the median rank under the peer-wait fix). A host segment starts when
the sync that opens it returns: at the later of the call and the end of the GPU work it waited
for, plus its wake latency. Measured times are used only for the first segment of each host thread
(when the thread starts), for activities with no launching call and no predecessor, and to order
the events (the measured order is a topological order of the graph: every edge goes from an event
that was measured earlier to one measured later).

The loop runs once over the events in that order, in plain Python over lists (one pass,
~1 µs an event): a longest-path computation has no vector form that beats it on these graphs,
whose paths switch between streams, ranks and the host thousands of times.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.graph.fixes import ReplayInputs
from analyzers.graph.set_graph import SetGraph

ANCHOR, LAUNCH, STREAM, DEP, DEP2 = 0, 1, 2, 3, 4
UNSET = -(1 << 62)


@dataclass
class Replay:
    """Replayed times and, for each event, which input set it (the critical path reads these)."""

    start: np.ndarray
    end: np.ndarray
    why: np.ndarray  # per node: ANCHOR | LAUNCH | STREAM | DEP | DEP2
    arrival: np.ndarray  # per collective: when its transfer started
    late: np.ndarray  # per collective: the member whose arrival set it
    seg_time: np.ndarray  # per host segment: when it started
    sync_call: np.ndarray  # per sync: when the call started
    sync_resume: np.ndarray  # per sync: when it returned
    sync_gpu_bound: np.ndarray  # per sync: the awaited GPU work (not the call) set its return
    order_violations: int  # reads of a collective member's end before its join (should be 0)


def loop_order(sg: SetGraph) -> np.ndarray:
    """GPU nodes by ordering key, sync returns by measured return; returns before nodes at ties."""
    keys = np.r_[sg.order_key, sg.sync_end]
    kind = np.r_[np.ones(sg.n, dtype=np.int8), np.zeros(len(sg.sync_end), dtype=np.int8)]
    return np.lexsort((kind, keys))


class _Static:
    """The graph's lists that no fix changes, made once per graph (tolist costs ~1 ms per 100k)."""

    def __init__(self, sg: SetGraph, order: np.ndarray) -> None:
        self.order = order.tolist()
        self.prev, self.turn, self.dlat = sg.prev.tolist(), sg.turnaround.tolist(), sg.dep_lat.tolist()
        self.anchor, self.coll = sg.start.tolist(), sg.coll.tolist()
        self.ptr, self.cnodes = sg.coll_ptr.tolist(), sg.coll_nodes.tolist()
        self.s_seg, self.s_aw, self.s_lat = sg.sync_seg.tolist(), sg.sync_awaited.tolist(), sg.sync_lat.tolist()
        self.s_opens = sg.sync_opens.tolist()
        has = sg.seg >= 0
        # launches in a thread's first segment have a fixed host time; the others move with their sync
        self.static = has & (sg.seg_opened_by[np.maximum(sg.seg, 0)] < 0)
        self.dseg = np.where(has & ~self.static, sg.seg, -1).tolist()


def _static(sg: SetGraph, order: np.ndarray | None) -> _Static:
    cached = getattr(sg, "_replay_static", None)
    if cached is None or (order is not None and cached.order is not None and len(cached.order) != len(order)):
        cached = _Static(sg, loop_order(sg) if order is None else order)
        sg._replay_static = cached  # type: ignore[attr-defined]
    return cached


def replay(sg: SetGraph, inp: ReplayInputs, order: np.ndarray | None = None) -> Replay:
    """Run the simulation once (see the module docstring)."""
    n = sg.n
    st = _static(sg, order)
    dur = inp.dur.tolist()
    prev, turn, dlat, anchor, coll = st.prev, st.turn, st.dlat, st.anchor, st.coll
    dseg = st.dseg
    doff = (inp.off + inp.latency).tolist()
    seg_c = np.maximum(sg.seg, 0)
    ready0 = np.where(st.static, sg.seg_base[seg_c] + inp.off + inp.latency, UNSET).tolist()
    has_dep = (inp.dep >= 0) | (inp.dep2 >= 0)
    dep, dep2 = inp.dep.tolist(), inp.dep2.tolist()
    depany = has_dep.tolist()
    ptr, cnodes = st.ptr, st.cnodes
    left = np.diff(sg.coll_ptr).tolist()
    n_coll = len(left)
    arrival, late = [0] * n_coll, [-1] * n_coll
    median = inp.join == "median"
    seg_time = sg.seg_base.tolist()
    s_seg, s_aw, s_lat, s_opens = st.s_seg, st.s_aw, st.s_lat, st.s_opens
    s_off, s_blocks, s_cost = inp.sync_off.tolist(), inp.sync_blocks.tolist(), inp.sync_cost.tolist()
    ns = len(s_seg)
    s_call, s_res, s_gpu = [0] * ns, [0] * ns, [False] * ns
    start, end, why = [0] * n, [UNSET] * n, [ANCHOR] * n
    violations = 0
    for k in st.order:
        if k < n:
            t = ready0[k]
            w = LAUNCH
            sd = dseg[k]
            if sd >= 0:
                t = seg_time[sd] + doff[k]
            p = prev[k]
            if p >= 0:
                e = end[p]
                if e == UNSET:
                    violations += 1
                    e = start[p] + dur[p]
                e += turn[k]
                if e > t:
                    t, w = e, STREAM
            if depany[k]:
                d = dep[k]
                if d >= 0:
                    e = end[d]
                    if e == UNSET:
                        violations += 1
                        e = start[d] + dur[d]
                    e += dlat[k]
                    if e > t:
                        t, w = e, DEP
                d = dep2[k]
                if d >= 0:
                    e = end[d]
                    if e == UNSET:
                        violations += 1
                        e = start[d] + dur[d]
                    if e > t:
                        t, w = e, DEP2
            if t == UNSET:
                t, w = anchor[k], ANCHOR
            start[k] = t
            why[k] = w
            c = coll[k]
            if c < 0:
                end[k] = t + dur[k]
                continue
            left[c] -= 1
            if left[c]:
                continue
            members = cnodes[ptr[c]:ptr[c + 1]]
            starts = [start[m] for m in members]
            a = max(starts)
            late[c] = members[starts.index(a)]
            if median:
                a = int(np.median(starts))
            arrival[c] = a
            for m in members:
                sm = start[m]
                end[m] = (a if a > sm else sm) + dur[m]
        else:
            j = k - n
            call = seg_time[s_seg[j]] + s_off[j] if s_seg[j] >= 0 else 0
            if s_blocks[j]:
                r = call
                a = s_aw[j]
                if a >= 0 and end[a] != UNSET and end[a] > call:
                    r, s_gpu[j] = end[a], True
                r += s_lat[j]
            else:
                r = call + s_cost[j]
            s_call[j], s_res[j] = call, r
            if s_opens[j] >= 0:
                seg_time[s_opens[j]] = r
    i64 = np.int64
    end_a = np.asarray(end, dtype=i64)
    unset = end_a == UNSET
    if unset.any():  # a member of a collective whose other members were never reached
        end_a[unset] = np.asarray(start, dtype=i64)[unset] + inp.dur[unset]
    return Replay(start=np.asarray(start, dtype=i64), end=end_a, why=np.asarray(why, dtype=np.int8),
                  arrival=np.asarray(arrival, dtype=i64), late=np.asarray(late, dtype=i64),
                  seg_time=np.asarray(seg_time, dtype=i64), sync_call=np.asarray(s_call, dtype=i64),
                  sync_resume=np.asarray(s_res, dtype=i64), sync_gpu_bound=np.asarray(s_gpu, dtype=bool),
                  order_violations=violations)
