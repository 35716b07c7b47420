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
import pandas as pd

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
        self.order_arr = order
        self.order = order.tolist()
        self.prev, self.turn, self.dlat = sg.prev.tolist(), sg.turnaround.tolist(), sg.dep_lat.tolist()
        self.anchor, self.coll = sg.start.tolist(), sg.coll.tolist()
        self.ptr, self.cnodes = sg.coll_ptr.tolist(), sg.coll_nodes.tolist()
        self.s_seg, self.s_aw, self.s_lat = sg.sync_seg.tolist(), sg.sync_awaited.tolist(), sg.sync_lat.tolist()
        self.s_opens = sg.sync_opens.tolist()
        has = sg.seg >= 0
        # launches in a thread's first segment have a fixed host time; the others move with their sync
        opened = sg.seg_opened_by[np.maximum(sg.seg, 0)] if len(sg.seg_opened_by) else np.zeros(sg.n, dtype=np.int64)
        self.static = has & (opened < 0)
        self.dseg_arr = np.where(has & ~self.static, sg.seg, -1)
        self.dseg = self.dseg_arr.tolist()


def _static(sg: SetGraph, order: np.ndarray | None) -> _Static:
    cached = getattr(sg, "_replay_static", None)
    if cached is None or (order is not None and cached.order is not None and len(cached.order) != len(order)):
        cached = _Static(sg, loop_order(sg) if order is None else order)
        sg._replay_static = cached  # type: ignore[attr-defined]
    return cached


def _run_structure(sg: SetGraph, inp: ReplayInputs, st: _Static) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Followers, each activity's run head, followers in run order: they depend on the edges only, so
    fixes that change durations or host offsets reuse them (kept on the graph, by the edges' bytes)."""
    key = (inp.dep.tobytes(), inp.dep2.tobytes())
    cache: dict = sg.__dict__.setdefault("_run_structures", {})
    if key in cache:
        return cache[key]
    n = sg.n
    read = np.zeros(n + 1, dtype=bool)  # index n: "none"
    read[np.where(inp.dep >= 0, inp.dep, n)] = True
    read[np.where(inp.dep2 >= 0, inp.dep2, n)] = True
    read[np.where(sg.sync_awaited >= 0, sg.sync_awaited, n)] = True
    read[:n] |= sg.coll >= 0
    p = sg.prev
    pc = np.maximum(p, 0)
    follower = (p >= 0) & (sg.coll < 0) & (inp.dep < 0) & (inp.dep2 < 0) & (st.dseg_arr < 0) & ~read[pc]
    f = np.flatnonzero(follower)
    head = np.arange(n)
    head[f] = p[f]
    while True:  # pointer jumping: each follower's head (the first non-follower up its stream)
        nxt = head[head]
        if np.array_equal(nxt, head):
            break
        head = nxt
    o = f[np.lexsort((sg.start[f], head[f]))]
    if len(cache) > 8:
        cache.clear()
    cache[key] = (follower, head, o)
    return follower, head, o


class _Runs:
    """Stream runs the loop skips: a *follower* is an activity whose only input besides its fixed
    launch time is its stream predecessor, and whose predecessor nobody else reads. A run (a head and
    its followers) is a max-plus map of the head's end: follower k ends at max(head end + P_k, Q_k), so
    the loop sets the run's last end from the head's and the followers are filled in afterwards,
    vectorized (the same times as visiting each; tests check it)."""

    def __init__(self, sg: SetGraph, inp: ReplayInputs, st: _Static, ready0: np.ndarray) -> None:
        n = sg.n
        self.follower, head, o = _run_structure(sg, inp, st)
        self.head = head
        h = head[o]
        step = sg.turnaround[o] + inp.dur[o]
        cum = np.cumsum(step)
        first = np.r_[True, h[1:] != h[:-1]] if len(h) else np.zeros(0, dtype=bool)
        base = np.maximum.accumulate(np.where(first, cum - step, 0)) if len(h) else cum
        pk = cum - base
        x = pd.Series(ready0[o] + inp.dur[o] - pk)
        qk = pk + x.groupby(h).cummax().to_numpy() if len(h) else pk
        self.rows, self.p, self.q = o, pk, qk
        last = np.r_[h[1:] != h[:-1], True] if len(h) else np.zeros(0, dtype=bool)
        self.tail = np.full(n, -1, dtype=np.int64)
        self.ph = np.zeros(n, dtype=np.int64)
        self.qh = np.zeros(n, dtype=np.int64)
        self.tail[h[last]] = o[last]
        self.ph[h[last]], self.qh[h[last]] = pk[last], qk[last]

    def fill(self, start: np.ndarray, end: np.ndarray, why: np.ndarray, sg: SetGraph, inp: ReplayInputs,
             ready0: np.ndarray) -> None:
        o = self.rows
        if not len(o):
            return
        end[o] = np.maximum(end[self.head[o]] + self.p, self.q)
        start[o] = end[o] - inp.dur[o]
        stream_bound = end[sg.prev[o]] + sg.turnaround[o] > ready0[o]  # the loop: a launch wins ties
        why[o] = np.where(stream_bound, STREAM, LAUNCH)


def replay(sg: SetGraph, inp: ReplayInputs, order: np.ndarray | None = None, compress: bool = True) -> Replay:
    """Run the simulation once (see the module docstring); compress=False visits every activity."""
    n = sg.n
    st = _static(sg, order)
    dur = inp.dur.tolist()
    prev, turn, dlat, anchor, coll = st.prev, st.turn, st.dlat, st.anchor, st.coll
    dseg = st.dseg
    seg_c = np.maximum(sg.seg, 0)
    seg_base = sg.seg_base[seg_c] if len(sg.seg_base) else np.zeros(n, dtype=np.int64)
    ready0_a = np.where(st.static, seg_base + inp.off + inp.latency, UNSET)
    ready0 = ready0_a.tolist()
    runs = _Runs(sg, inp, st, ready0_a) if compress else None
    visit = ~runs.follower if runs is not None else np.ones(n, dtype=bool)
    keep = np.r_[visit, np.ones(len(sg.sync_end), dtype=bool)]
    order_l = st.order_arr[keep[st.order_arr]].tolist() if runs is not None else st.order
    # sparse inputs as dicts: most activities have no event wait, no moving launch, no run to close
    dyn = np.flatnonzero(visit & (st.dseg_arr >= 0))
    doff = dict(zip(dyn.tolist(), (inp.off[dyn] + inp.latency[dyn]).tolist(), strict=True))
    wd = np.flatnonzero(visit & ((inp.dep >= 0) | (inp.dep2 >= 0)))
    deps = dict(zip(wd.tolist(), zip(inp.dep[wd].tolist(), inp.dep2[wd].tolist(), strict=True), strict=True))
    runs_of: dict[int, tuple[int, int, int]] = {}
    if runs is not None:
        h = np.flatnonzero(runs.tail >= 0)
        runs_of = dict(zip(h.tolist(), zip(runs.tail[h].tolist(), runs.ph[h].tolist(), runs.qh[h].tolist(),
                                           strict=True), strict=True))
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
    for k in order_l:
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
            dd = deps.get(k)
            if dd is not None:
                d, d2 = dd
                if d >= 0:
                    e = end[d]
                    if e == UNSET:
                        violations += 1
                        e = start[d] + dur[d]
                    e += dlat[k]
                    if e > t:
                        t, w = e, DEP
                if d2 >= 0:
                    e = end[d2]
                    if e == UNSET:
                        violations += 1
                        e = start[d2] + dur[d2]
                    if e > t:
                        t, w = e, DEP2
            if t == UNSET:
                t, w = anchor[k], ANCHOR
            start[k] = t
            why[k] = w
            c = coll[k]
            if c < 0:
                end[k] = e = t + dur[k]
                rn = runs_of.get(k)
                if rn is not None:
                    e += rn[1]
                    end[rn[0]] = e if e > rn[2] else rn[2]
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
                end[m] = e = (a if a > sm else sm) + dur[m]
                rn = runs_of.get(m)
                if rn is not None:
                    e += rn[1]
                    end[rn[0]] = e if e > rn[2] else rn[2]
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
    end_a, start_a, why_a = np.asarray(end, dtype=i64), np.asarray(start, dtype=i64), np.asarray(why, dtype=np.int8)
    if runs is not None:
        runs.fill(start_a, end_a, why_a, sg, inp, ready0_a)
    unset = end_a == UNSET
    if unset.any():  # a member of a collective whose other members were never reached
        end_a[unset] = start_a[unset] + inp.dur[unset]
    return Replay(start=start_a, end=end_a, why=why_a,
                  arrival=np.asarray(arrival, dtype=i64), late=np.asarray(late, dtype=i64),
                  seg_time=np.asarray(seg_time, dtype=i64), sync_call=np.asarray(s_call, dtype=i64),
                  sync_resume=np.asarray(s_res, dtype=i64), sync_gpu_bound=np.asarray(s_gpu, dtype=bool),
                  order_violations=violations)
