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

The loop runs once over the events in that order, in plain Python (one pass, ~1.1-1.3 µs an
event): a longest-path computation has no vector form that beats it on these graphs, whose paths
switch between streams, ranks and the host thousands of times. What it holds does not grow past
the arrays: the replayed times are numpy arrays it reads and writes through memoryviews (8 bytes
an activity), and it takes the events CHUNK at a time, each chunk's columns gathered from the
graph's arrays and made lists only for that chunk, so every rank of a large set is replayed at once.
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
CHUNK = 1 << 16  # events whose columns the loop holds as lists at once
MAX_VISITS_KEPT = 4  # edge sets whose loop order is kept on the graph


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
        self.s_seg, self.s_aw = memoryview(sg.sync_seg), memoryview(sg.sync_awaited)
        self.s_lat, self.s_opens = memoryview(sg.sync_lat), memoryview(sg.sync_opens)


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
    """The loop's events in order (activities it visits and sync returns) and the stream runs it skips: what
    depends on the graph's edges only, so fixes that change durations or host offsets reuse it (kept on the
    graph, by the edges' bytes). Arrays only: the loop gathers each chunk's columns from them (replay)."""

    def __init__(self, sg: SetGraph, inp: ReplayInputs, st: _Static, compress: bool) -> None:
        n = sg.n
        if compress:
            self.follower, head, self.rows = _run_structure(sg, inp, st)
        else:
            self.follower = np.zeros(n, dtype=bool)
            head, self.rows = np.arange(n), np.zeros(0, dtype=np.int64)
        keep = np.r_[~self.follower, np.ones(len(sg.sync_end), dtype=bool)]
        self.k = st.order[keep[st.order]]  # per event: its node, or n + its sync
        o = self.rows  # the runs: their heads, first and last followers, the followers' fixed columns
        self.run_head = head[o]
        h = self.run_head
        self.run_first = np.r_[True, h[1:] != h[:-1]] if len(h) else np.zeros(0, dtype=bool)
        last = np.r_[h[1:] != h[:-1], True] if len(h) else np.zeros(0, dtype=bool)
        self.heads = h[last]
        self.tail_of = np.full(n, -1, dtype=np.int64)  # per head: its run's last follower
        self.tail_of[self.heads] = o[last]
        self.run_turn, self.run_prev = sg.turnaround[o], sg.prev[o]


def _gate(inp: ReplayInputs, n: int) -> tuple[np.ndarray, np.ndarray]:
    if inp.gate is None or inp.gate_lat is None:
        return np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64)
    return inp.gate, inp.gate_lat


def _visits(sg: SetGraph, inp: ReplayInputs, st: _Static, compress: bool) -> _Visits:
    """The visits of this edge set, cached on the graph by a digest of the edges (the arrays themselves
    would be megabytes a key). Edge sets without SM-residency gates (the unfixed graph and each fix's) are
    kept, up to MAX_VISITS_KEPT (the unfixed graph's and a fix's: each is ~10 bytes an event and an activity);
    the gated ones, which each round of a contended replay changes, take one slot."""
    h = hashlib.blake2b(digest_size=16)
    gated = inp.gate is not None and inp.gate_lat is not None and bool((inp.gate >= 0).any())
    for a in (inp.dep, inp.dep2, *((inp.gate, inp.gate_lat) if gated else ())):
        h.update(np.ascontiguousarray(a).view(np.uint8))
    key = (compress, gated, h.digest())
    cache: dict = sg.__dict__.setdefault("_replay_visits_gated" if gated else "_replay_visits", {})
    if key not in cache:
        if len(cache) >= (1 if gated else MAX_VISITS_KEPT):
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




def replay(sg: SetGraph, inp: ReplayInputs, order: np.ndarray | None = None, compress: bool = True) -> Replay:
    """Run the simulation once (see the module docstring); compress=False visits every activity.

    The replayed times live in numpy arrays the loop reads and writes through memoryviews (a Python int per
    access, 8 bytes a node at rest); each CHUNK of events has its columns gathered and made lists for the
    loop, so what the loop holds does not grow with the set."""
    n = sg.n
    i64 = np.int64
    st = _static(sg, order)
    vs = _visits(sg, inp, st, compress)
    ready0_a = np.where(st.static, st.seg_base + inp.off + inp.latency, UNSET)
    runs = _Runs(sg, inp, vs, ready0_a)
    gate_a, glat_a = _gate(inp, n)
    cm = sg.coll_nodes
    ptr, cnodes = memoryview(sg.coll_ptr), memoryview(cm)
    c_dur, c_tail = memoryview(inp.dur[cm]), memoryview(vs.tail_of[cm])
    c_ph, c_qh = memoryview(runs.ph[cm]), memoryview(runs.qh[cm])
    left_a = np.diff(sg.coll_ptr)
    arrival_a, late_a = np.zeros(len(left_a), dtype=i64), np.full(len(left_a), -1, dtype=i64)
    left, arrival, late = memoryview(left_a), memoryview(arrival_a), memoryview(late_a)
    median = inp.join == "median"
    seg_time_a = sg.seg_base.astype(i64, copy=True)
    seg_time = memoryview(seg_time_a)
    s_seg, s_aw, s_lat, s_opens = st.s_seg, st.s_aw, st.s_lat, st.s_opens
    s_off, s_blocks, s_cost = memoryview(inp.sync_off), memoryview(inp.sync_blocks), memoryview(inp.sync_cost)
    ns = len(sg.sync_seg)
    s_call_a, s_res_a, s_gpu_a = np.zeros(ns, dtype=i64), np.zeros(ns, dtype=i64), np.zeros(ns, dtype=bool)
    s_call, s_res, s_gpu = memoryview(s_call_a), memoryview(s_res_a), memoryview(s_gpu_a)
    start_a, end_a, why_a = np.zeros(n, dtype=i64), np.full(n, UNSET, dtype=i64), np.full(n, ANCHOR, dtype=np.int8)
    start, end, why = memoryview(start_a), memoryview(end_a), memoryview(why_a)
    violations = 0
    # the rare inputs (a second event wait, an SM gate, a stream run to set) are read through these where an
    # activity's `rare` flag says it has one, so that the common activity's row carries ten columns, not fifteen
    dur, dep2, gate, glat = memoryview(inp.dur), memoryview(inp.dep2), memoryview(gate_a), memoryview(glat_a)
    tail, ph, qh = memoryview(vs.tail_of), memoryview(runs.ph), memoryview(runs.qh)
    rare_a = (inp.dep2 >= 0) | (gate_a >= 0) | (vs.tail_of >= 0)
    unset, launch_w, stream_w, dep_w, dep2_w, gate_w, anchor_w = UNSET, LAUNCH, STREAM, DEP, DEP2, GATE, ANCHOR
    for lo_ev in range(0, len(vs.k), CHUNK):
        ev = slice(lo_ev, lo_ev + CHUNK)
        ks = vs.k[ev]
        gi = np.where(ks < n, ks, 0)  # per event: the node whose columns it reads (a sync reads node 0's)
        dseg = st.dseg_arr[gi]  # the host segment its launch moves with, -1
        launch = ready0_a[gi]  # a fixed launch's time; where it moves, its offset into the segment
        moving = dseg >= 0
        mv = gi[moving]
        launch[moving] = inp.off[mv] + inp.latency[mv]
        cols = (ks, launch, dseg, sg.prev[gi], sg.turnaround[gi], inp.dep[gi], sg.dep_lat[gi], sg.coll[gi],
                inp.dur[gi], rare_a[gi])
        for k, t, sd, p, tn, d, dl, c, dk, rare in zip(*(a.tolist() for a in cols), strict=True):
            if k < n:
                w = launch_w
                if sd >= 0:
                    t += seg_time[sd]
                if p >= 0:
                    e = end[p]
                    if e == unset:
                        violations += 1
                        e = start[p] + dur[p]
                    e += tn
                    if e > t:
                        t, w = e, stream_w
                if d >= 0:
                    e = end[d]
                    if e == unset:
                        violations += 1
                        e = start[d] + dur[d]
                    e += dl
                    if e > t:
                        t, w = e, dep_w
                if rare:
                    d2 = dep2[k]
                    if d2 >= 0:
                        e = end[d2]
                        if e == unset:
                            violations += 1
                            e = start[d2] + dur[d2]
                        if e > t:
                            t, w = e, dep2_w
                    g = gate[k]
                    if g >= 0:
                        e = end[g]
                        if e == unset:
                            violations += 1
                            e = start[g] + dur[g]
                        e += glat[k]
                        if e > t:
                            t, w = e, gate_w
                if t == unset:  # no launch, no input: its measured start
                    t, w = int(sg.start[k]), anchor_w
                start[k] = t
                why[k] = w
                if c < 0:
                    end[k] = e = t + dk
                    if rare:
                        tl = tail[k]
                        if tl >= 0:
                            e += ph[k]
                            q = qh[k]
                            end[tl] = e if e > q else q
                    continue
                left[c] -= 1
                if left[c]:
                    continue
                lo, hi = ptr[c], ptr[c + 1]
                if hi - lo == 2:  # the common pair (two ranks, a send and its receive), without lists
                    m0, m1 = cnodes[lo], cnodes[lo + 1]
                    s0, s1 = start[m0], start[m1]
                    if s0 >= s1:
                        a, late[c] = s0, m0
                    else:
                        a, late[c] = s1, m1
                    if median:
                        a = _median([s0, s1])
                    arrival[c] = a
                    end[m0] = e = (a if a > s0 else s0) + c_dur[lo]
                    tl = c_tail[lo]
                    if tl >= 0:
                        e += c_ph[lo]
                        q = c_qh[lo]
                        end[tl] = e if e > q else q
                    end[m1] = e = (a if a > s1 else s1) + c_dur[lo + 1]
                    tl = c_tail[lo + 1]
                    if tl >= 0:
                        e += c_ph[lo + 1]
                        q = c_qh[lo + 1]
                        end[tl] = e if e > q else q
                    continue
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
                    if a >= 0 and end[a] != unset and end[a] > call:
                        r, s_gpu[j] = end[a], True
                    r += s_lat[j]
                else:
                    r = call + s_cost[j]
                s_call[j], s_res[j] = call, r
                if s_opens[j] >= 0:
                    seg_time[s_opens[j]] = r
    runs.fill(start_a, end_a, why_a)
    unset = end_a == UNSET
    if unset.any():  # a member of a collective whose other members were never reached
        end_a[unset] = start_a[unset] + inp.dur[unset]
    return Replay(start=start_a, end=end_a, why=why_a, arrival=arrival_a, late=late_a, seg_time=seg_time_a,
                  sync_call=s_call_a, sync_resume=s_res_a, sync_gpu_bound=s_gpu_a, order_violations=violations)
