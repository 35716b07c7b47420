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

import hashlib
from dataclasses import dataclass

import numpy as np

from analyzers.graph.fixes import ReplayInputs
from analyzers.graph.scan import grouped_cummax
from analyzers.graph.set_graph import SetGraph

ANCHOR, LAUNCH, STREAM, DEP, DEP2, GATE = 0, 1, 2, 3, 4, 5
UNSET = -(1 << 62)


@dataclass
class Replay:
    """Replayed times and, for each event, which input set it (the critical path reads these)."""

    start: np.ndarray
    end: np.ndarray
    why: np.ndarray  # per node: ANCHOR | LAUNCH | STREAM | DEP | DEP2 | GATE
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
    """What the loop reads that no fix changes, made once per graph."""

    def __init__(self, sg: SetGraph, order: np.ndarray) -> None:
        self.order = order
        has = sg.seg >= 0
        # launches in a thread's first segment have a fixed host time; the others move with their sync
        opened = sg.seg_opened_by[np.maximum(sg.seg, 0)] if len(sg.seg_opened_by) else np.zeros(sg.n, dtype=np.int64)
        self.static = has & (opened < 0)
        self.dseg_arr = np.where(has & ~self.static, sg.seg, -1)
        self.seg_base = sg.seg_base[np.maximum(sg.seg, 0)] if len(sg.seg_base) else np.zeros(sg.n, dtype=np.int64)
        self.s_seg, self.s_aw, self.s_lat = sg.sync_seg.tolist(), sg.sync_awaited.tolist(), sg.sync_lat.tolist()
        self.s_opens = sg.sync_opens.tolist()
        self.ptr, self.cnodes = sg.coll_ptr.tolist(), sg.coll_nodes.tolist()


def _static(sg: SetGraph, order: np.ndarray | None) -> _Static:
    cached = getattr(sg, "_replay_static", None)
    if cached is None or (order is not None and len(cached.order) != len(order)):
        cached = _Static(sg, loop_order(sg) if order is None else order)
        sg._replay_static = cached  # type: ignore[attr-defined]
    return cached


def _run_structure(sg: SetGraph, inp: ReplayInputs, st: _Static) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Followers, each activity's run head, followers grouped by run in stream order (see _Runs)."""
    n = sg.n
    read = np.zeros(n + 1, dtype=bool)  # index n: "none"
    read[np.where(inp.dep >= 0, inp.dep, n)] = True
    read[np.where(inp.dep2 >= 0, inp.dep2, n)] = True
    gate = _gate(inp, n)[0]
    read[np.where(gate >= 0, gate, n)] = True
    read[np.where(sg.sync_awaited >= 0, sg.sync_awaited, n)] = True
    read[:n] |= sg.coll >= 0
    p = sg.prev
    pc = np.maximum(p, 0)
    follower = (p >= 0) & (sg.coll < 0) & (inp.dep < 0) & (inp.dep2 < 0) & (gate < 0) & (st.dseg_arr < 0) & ~read[pc]
    so = sg.stream_order
    if so is not None and len(so) == n:
        fo = follower[so]
        if not fo[:1].any() and np.array_equal(p[so[1:][fo[1:]]], so[:-1][fo[1:]]):
            # every follower comes right after its predecessor: its head is the last non-follower before it
            pos = np.arange(n)
            head = np.empty(n, dtype=np.int64)
            head[so] = so[np.maximum.accumulate(np.where(fo, 0, pos))]
            return follower, head, so[fo]
    f = np.flatnonzero(follower)
    head = np.arange(n)
    head[f] = p[f]
    while True:  # pointer jumping: each follower's head (the first non-follower up its stream)
        nxt = head[head]
        if np.array_equal(nxt, head):
            break
        head = nxt
    return follower, head, f[np.lexsort((sg.start[f], head[f]))]


class _Visits:
    """The loop's events in order (activities it visits and sync returns) with what it reads of each that
    depends on the graph's edges only, and the stream runs it skips: fixes that change durations or host
    offsets reuse it (kept on the graph, by the edges' bytes). The loop zips these lists instead of
    indexing arrays by node."""

    def __init__(self, sg: SetGraph, inp: ReplayInputs, st: _Static, compress: bool) -> None:
        n = sg.n
        if compress:
            self.follower, head, self.rows = _run_structure(sg, inp, st)
        else:
            self.follower = np.zeros(n, dtype=bool)
            head, self.rows = np.arange(n), np.zeros(0, dtype=np.int64)
        keep = np.r_[~self.follower, np.ones(len(sg.sync_end), dtype=bool)]
        ol = st.order[keep[st.order]]
        gpu = ol < n
        self.nodes = ol[gpu]  # the visited activities, in loop order
        self.gi = np.where(gpu, ol, 0)  # per event: the node whose columns it reads (a sync reads node 0's)
        gi = self.gi
        self.k = ol.tolist()
        self.prev, self.turn = sg.prev[gi].tolist(), sg.turnaround[gi].tolist()
        self.dep, self.dep2, self.dlat = inp.dep[gi].tolist(), inp.dep2[gi].tolist(), sg.dep_lat[gi].tolist()
        gate, gate_lat = _gate(inp, n)
        self.gate, self.glat = gate[gi].tolist(), gate_lat[gi].tolist()
        self.coll, self.dseg = sg.coll[gi].tolist(), st.dseg_arr[gi].tolist()
        self.moving = np.flatnonzero(st.dseg_arr[gi] >= 0)  # events whose launch moves with its host segment
        o = self.rows  # the runs: their heads, first and last followers, the followers' fixed columns
        self.run_head = head[o]
        h = self.run_head
        self.run_first = np.r_[True, h[1:] != h[:-1]] if len(h) else np.zeros(0, dtype=bool)
        last = np.r_[h[1:] != h[:-1], True] if len(h) else np.zeros(0, dtype=bool)
        self.heads = h[last]
        tail = np.full(n, -1, dtype=np.int64)  # per head: its run's last follower
        tail[self.heads] = o[last]
        self.tail, self.c_tail = tail[gi].tolist(), tail[sg.coll_nodes].tolist()
        self.run_turn, self.run_prev = sg.turnaround[o], sg.prev[o]


def _gate(inp: ReplayInputs, n: int) -> tuple[np.ndarray, np.ndarray]:
    if inp.gate is None or inp.gate_lat is None:
        return np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64)
    return inp.gate, inp.gate_lat


def _visits(sg: SetGraph, inp: ReplayInputs, st: _Static, compress: bool) -> _Visits:
    """The visits of this edge set, cached on the graph by a digest of the edges (the arrays themselves
    would be megabytes a key). Edge sets without SM-residency gates (the unfixed graph and each fix's) are
    kept, up to 8; the gated ones, which each round of a contended replay changes, take one slot."""
    gate, gate_lat = _gate(inp, sg.n)
    h = hashlib.blake2b(digest_size=16)
    for a in (inp.dep, inp.dep2, gate, gate_lat):
        h.update(np.ascontiguousarray(a).view(np.uint8))
    key = (compress, h.digest())
    gated = bool((gate >= 0).any())
    cache: dict = sg.__dict__.setdefault("_replay_visits_gated" if gated else "_replay_visits", {})
    if key not in cache:
        if len(cache) >= (1 if gated else 8):
            cache.clear()
        cache[key] = _Visits(sg, inp, st, compress)
    return cache[key]


class _Runs:
    """Stream runs the loop skips: a *follower* is an activity whose only input besides its fixed
    launch time is its stream predecessor, and whose predecessor nobody else reads. A run (a head and
    its followers) is a max-plus map of the head's end: follower k ends at max(head end + P_k, Q_k), so
    the loop sets the run's last end from the head's and the followers are filled in afterwards,
    vectorized (the same times as visiting each; tests check it)."""

    def __init__(self, sg: SetGraph, inp: ReplayInputs, vs: _Visits, ready0: np.ndarray) -> None:
        n = sg.n
        o = vs.rows
        self.vs = vs
        self.dur, self.ready0 = inp.dur[o], ready0[o]
        step = vs.run_turn + self.dur
        cum = np.cumsum(step)
        base = np.maximum.accumulate(np.where(vs.run_first, cum - step, 0)) if len(o) else cum
        pk = cum - base
        qk = pk + grouped_cummax(self.ready0 + self.dur - pk, vs.run_first) if len(o) else pk
        self.p, self.q = pk, qk
        last = np.r_[vs.run_first[1:], True] if len(o) else np.zeros(0, dtype=bool)
        self.ph = np.zeros(n, dtype=np.int64)  # per head: its run's P and Q at the last follower
        self.qh = np.zeros(n, dtype=np.int64)
        self.ph[vs.heads], self.qh[vs.heads] = pk[last], qk[last]

    def fill(self, start: np.ndarray, end: np.ndarray, why: np.ndarray) -> None:
        vs = self.vs
        o = vs.rows
        if not len(o):
            return
        eo = np.maximum(end[vs.run_head] + self.p, self.q)
        end[o] = eo
        start[o] = eo - self.dur
        stream_bound = end[vs.run_prev] + vs.run_turn > self.ready0  # the loop: a launch wins ties
        why[o] = np.where(stream_bound, STREAM, LAUNCH)


def _median(values: list[int]) -> int:
    """int(np.median(values)) without numpy's per-call cost (the same float64 steps: a collective's
    arrivals are ns timestamps past 2**53, so the float rounding is part of the figure)."""
    s = sorted(values)
    m = len(s) // 2
    return int(float(s[m])) if len(s) % 2 else int((float(s[m - 1]) + float(s[m])) / 2)


def _picked(values: list, nodes: list[int]) -> np.ndarray:
    return np.fromiter(map(values.__getitem__, nodes), dtype=np.int64, count=len(nodes))


def replay(sg: SetGraph, inp: ReplayInputs, order: np.ndarray | None = None, compress: bool = True) -> Replay:
    """Run the simulation once (see the module docstring); compress=False visits every activity."""
    n = sg.n
    st = _static(sg, order)
    vs = _visits(sg, inp, st, compress)
    ready0_a = np.where(st.static, st.seg_base + inp.off + inp.latency, UNSET)
    runs = _Runs(sg, inp, vs, ready0_a)
    gi = vs.gi
    launch = ready0_a[gi]  # a fixed launch's time; where it moves, its offset into the segment
    mv = gi[vs.moving]
    launch[vs.moving] = inp.off[mv] + inp.latency[mv]
    launch_l, dur, ph, qh = launch.tolist(), inp.dur[gi].tolist(), runs.ph[gi].tolist(), runs.qh[gi].tolist()
    ptr, cnodes = st.ptr, st.cnodes
    cm = sg.coll_nodes
    c_dur, c_tail, c_ph, c_qh = inp.dur[cm].tolist(), vs.c_tail, runs.ph[cm].tolist(), runs.qh[cm].tolist()
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
    for k, t, sd, p, tn, d, d2, dl, c, dk, tl, pk, qk, g, gl in zip(
            vs.k, launch_l, vs.dseg, vs.prev, vs.turn, vs.dep, vs.dep2, vs.dlat, vs.coll, dur, vs.tail, ph, qh,
            vs.gate, vs.glat, strict=True):
        if k < n:
            w = LAUNCH
            if sd >= 0:
                t += seg_time[sd]
            if p >= 0:
                e = end[p]
                if e == UNSET:
                    violations += 1
                    e = start[p] + int(inp.dur[p])
                e += tn
                if e > t:
                    t, w = e, STREAM
            if d >= 0:
                e = end[d]
                if e == UNSET:
                    violations += 1
                    e = start[d] + int(inp.dur[d])
                e += dl
                if e > t:
                    t, w = e, DEP
            if d2 >= 0:
                e = end[d2]
                if e == UNSET:
                    violations += 1
                    e = start[d2] + int(inp.dur[d2])
                if e > t:
                    t, w = e, DEP2
            if g >= 0:
                e = end[g]
                if e == UNSET:
                    violations += 1
                    e = start[g] + int(inp.dur[g])
                e += gl
                if e > t:
                    t, w = e, GATE
            if t == UNSET:  # no launch, no input: its measured start
                t, w = int(sg.start[k]), ANCHOR
            start[k] = t
            why[k] = w
            if c < 0:
                end[k] = e = t + dk
                if tl >= 0:
                    e += pk
                    end[tl] = e if e > qk else qk
                continue
            left[c] -= 1
            if left[c]:
                continue
            lo, hi = ptr[c], ptr[c + 1]
            members = cnodes[lo:hi]
            starts = [start[m] for m in members]
            a = max(starts)
            late[c] = members[starts.index(a)]
            if median:
                a = _median(starts)
            arrival[c] = a
            for m, sm, dm, tl, pm, qm in zip(members, starts, c_dur[lo:hi], c_tail[lo:hi], c_ph[lo:hi], c_qh[lo:hi],
                                             strict=True):
                end[m] = e = (a if a > sm else sm) + dm
                if tl >= 0:
                    e += pm
                    end[tl] = e if e > qm else qm
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
    visited = vs.nodes.tolist()
    start_a, end_a = np.zeros(n, dtype=i64), np.full(n, UNSET, dtype=i64)
    why_a = np.full(n, ANCHOR, dtype=np.int8)
    start_a[vs.nodes], end_a[vs.nodes] = _picked(start, visited), _picked(end, visited)
    why_a[vs.nodes] = _picked(why, visited)
    runs.fill(start_a, end_a, why_a)
    unset = end_a == UNSET
    if unset.any():  # a member of a collective whose other members were never reached
        end_a[unset] = start_a[unset] + inp.dur[unset]
    return Replay(start=start_a, end=end_a, why=why_a,
                  arrival=np.asarray(arrival, dtype=i64), late=np.asarray(late, dtype=i64),
                  seg_time=np.asarray(seg_time, dtype=i64), sync_call=np.asarray(s_call, dtype=i64),
                  sync_resume=np.asarray(s_res, dtype=i64), sync_gpu_bound=np.asarray(s_gpu, dtype=bool),
                  order_violations=violations)
