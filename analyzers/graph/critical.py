"""The critical path of a step, read off a replay: the chain of activities and waits that set the
step's end, walked back from that end to the step's start, with every nanosecond of the step
attributed to one part (ATTRIBUTION): the parts add up to the step.

- compute / copies (copy and memset) / other: a GPU activity on the path, by its category;
- comm_transfer: the transfer part of a communication kernel on the path (exposed: nothing
  shortened the step behind it);
- peer_wait: the path crossed to another rank at a collective that waited for it: the time spent
  on that rank's path, credited to that late rank, with the activity that filled most of it;
- launch_gaps: the GPU waited for the host to launch (host CPU time between launches, launch latency);
- sync_idle: the GPU waited for a host that had blocked in a sync (the wake-up and the host time
  until the next launch).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from analyzers.graph.fixes import ReplayInputs
from analyzers.graph.rank_graph import CAT_CODES
from analyzers.graph.replay import DEP, DEP2, GATE, LAUNCH, STREAM, Replay
from analyzers.graph.set_graph import SetGraph

ATTRIBUTION = ("compute", "comm_transfer", "peer_wait", "launch_gaps", "sync_idle", "copies", "other")
_CAT_PART = {CAT_CODES["compute"]: "compute", CAT_CODES["comm"]: "comm_transfer", CAT_CODES["copy"]: "copies",
             CAT_CODES["memset"]: "copies", CAT_CODES["other"]: "other"}
MAX_STEPS_WALKED = 10_000_000  # a guard against a cycle (a graph is acyclic: never reached)


def lists_of(obj: Any, *names: str) -> list[Any]:
    """obj's arrays as memoryviews (kept on it; drop_lists frees them): the walk reads one element at a time,
    and a memoryview's element is a Python int at a fraction of a numpy scalar's cost, with no copy."""
    cache: dict[str, Any] = obj.__dict__.setdefault("_lists", {})
    out = []
    for k in names:
        if k not in cache:
            a = getattr(obj, k)
            cache[k] = memoryview(np.ascontiguousarray(a)) if a is not None else None
        out.append(cache[k])
    return out


def drop_lists(*objs: Any) -> None:
    """Free the views lists_of kept on these objects."""
    for o in objs:
        o.__dict__.pop("_lists", None)


class _Walk:
    """Accumulates the attribution of one rank's step while the path is walked back."""

    __slots__ = ("sg", "rank", "lo", "hi", "parts", "late", "causes", "away", "nodes", "frontier", "rank_of", "coll",
                 "cat", "prev", "seg", "seg_opened_by", "sync_awaited", "sync_seg", "start", "end", "why", "arrival",
                 "late_of", "seg_time", "sync_call", "sync_resume", "sync_gpu_bound", "dep", "dep2", "gate", "off",
                 "sync_blocks")

    def __init__(self, sg: SetGraph, rp: Replay, inp: ReplayInputs, rank: int, lo: int, hi: int) -> None:
        self.sg, self.rank, self.lo, self.hi = sg, rank, lo, hi
        self.parts: dict[str, int] = dict.fromkeys(ATTRIBUTION, 0)
        self.late: dict[int, int] = defaultdict(int)
        self.causes: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.away: int | None = None  # the late rank while the path runs on another rank
        self.nodes: list[int] = []
        self.frontier = hi  # the path is walked back in time: everything after this is attributed
        (self.rank_of, self.coll, self.cat, self.prev, self.seg, self.seg_opened_by, self.sync_awaited,
         self.sync_seg) = lists_of(sg, "rank_of", "coll", "cat", "prev", "seg", "seg_opened_by", "sync_awaited",
                                   "sync_seg")
        (self.start, self.end, self.why, self.arrival, self.late_of, self.seg_time, self.sync_call,
         self.sync_resume, self.sync_gpu_bound) = lists_of(rp, "start", "end", "why", "arrival", "late", "seg_time",
                                                           "sync_call", "sync_resume", "sync_gpu_bound")
        self.dep, self.dep2, self.gate, self.off, self.sync_blocks = lists_of(inp, "dep", "dep2", "gate", "off",
                                                                               "sync_blocks")

    def add(self, part: str, a: int, b: int, node: int = -1) -> None:
        """Attribute [a, b) to part, less what the walk already attributed (each ns counts once); node: the
        activity that ran then (its name goes with peer wait). The frontier never passes hi, so clipping b to
        it clips it to hi too."""
        if b <= a:
            return
        if b > self.frontier:
            b = self.frontier
        if a < self.lo:
            a = self.lo
        if b <= a:
            return
        self.frontier = a
        if self.away is None:
            self.parts[part] += b - a
        else:
            self.parts["peer_wait"] += b - a
            self.late[self.away] += b - a
            label = self.sg.node_label(node) if node >= 0 else ""
            self.causes[self.away][f"{part}: {label}" if label else part] += b - a

    def enter(self, r: int) -> None:
        """The path reaches an activity of rank r."""
        if self.away is None and r != self.rank:
            self.away = r
        elif self.away is not None and r == self.rank:
            self.away = None


def _execute(w: _Walk, i: int, t: int) -> tuple[int, int] | None:
    """Attribute node i's run below time t; return (node, time) whose start explains it next."""
    w.enter(w.rank_of[i])
    w.nodes.append(i)
    s, e = w.start[i], w.end[i]
    if t < e:
        e = t
    c = w.coll[i]
    if c >= 0:
        a = w.arrival[c]
        if s > a:
            a = s
        w.add("comm_transfer", a, e, i)
        q = w.late_of[c]
        if q >= 0 and q != i and a > s:
            return _execute_arrival(w, q, a)
        w.add("comm_transfer", s, min(a, e), i)
        return i, s
    w.add(_CAT_PART[w.cat[i]], s, e, i)
    return i, s


def _execute_arrival(w: _Walk, q: int, t: int) -> tuple[int, int]:
    """The path reaches collective member q (another rank's) at its arrival t."""
    r = w.rank_of[q]
    if w.away is None and r != w.rank:
        w.away = r
    elif r == w.rank:
        w.away = None
    w.nodes.append(q)
    s = w.start[q]
    w.add("other", s, t)
    return q, s


def _explain_host(w: _Walk, seg: int, t: int, part: str) -> tuple[tuple[int, int] | None, int]:
    """The host segment seg reached the time t; walk the host back to the GPU work it waited for.

    Returns that work (node, time), or None where the host's chain ends, and how far back the walk
    attributed time (what is left before it is the step's unexplained start).
    """
    blocks = w.sync_blocks
    for _ in range(MAX_STEPS_WALKED):
        base = w.seg_time[seg]
        y = w.seg_opened_by[seg]
        w.add("sync_idle" if y >= 0 and blocks[y] else part, base, t)
        if y < 0 or base <= w.lo:
            return None, base
        call, res = w.sync_call[y], w.sync_resume[y]
        if blocks[y] and w.sync_gpu_bound[y]:
            a = w.sync_awaited[y]
            w.add("sync_idle", w.end[a], res)
            return (a, w.end[a]), w.end[a]
        w.add("sync_idle" if blocks[y] else part, call, res)
        seg, t = w.sync_seg[y], call
        if seg < 0:
            return None, call
    return None, t


def walk(sg: SetGraph, rp: Replay, inp: ReplayInputs, rank: int, lo: int, hi: int, node: int,
         at_end: bool) -> dict[str, Any]:
    """Attribution of [lo, hi) on rank's path ending at node's end (at_end) or start.

    The common step (an activity of no collective, reached through its stream, an event wait or a gate) is
    done inline here, with a gap of no length skipped before calling add: most of a path is such steps."""
    w = _Walk(sg, rp, inp, int(rank), int(lo), int(hi))
    node = int(node)
    cur: tuple[int, int] | None = _execute(w, node, w.hi) if at_end else (node, w.start[node])
    reached = w.hi
    why_of, end, start, prev, coll, cat, rank_of = w.why, w.end, w.start, w.prev, w.coll, w.cat, w.rank_of
    dep, dep2, gate = w.dep, w.dep2, w.gate
    nodes, add, me, w_lo = w.nodes, w.add, w.rank, w.lo
    part_of = _CAT_PART
    for _ in range(MAX_STEPS_WALKED):
        if cur is None:
            break
        i, t = cur
        reached = t
        if t <= w_lo:
            break
        why = why_of[i]
        if why == STREAM or why == DEP or why == DEP2 or why == GATE:
            p = prev[i] if why == STREAM else dep[i] if why == DEP else dep2[i] if why == DEP2 else gate[i]
            ep = end[p]
            if ep < t:
                add("other", ep, t)
            if coll[p] >= 0:
                cur = _execute(w, p, t if t < ep else ep)
                continue
            r = rank_of[p]  # _execute inlined for an activity of no collective
            if w.away is None:
                if r != me:
                    w.away = r
            elif r == me:
                w.away = None
            nodes.append(p)
            s = start[p]
            e = t if t < ep else ep
            if s < e:
                add(part_of[cat[p]], s, e, p)
            cur = (p, s)
        elif why == LAUNCH:
            sg_ = w.seg[i]
            ready = w.seg_time[sg_] + w.off[i]
            add("launch_gaps", ready, t)
            y = w.seg_opened_by[sg_]
            part = "launch_gaps" if y < 0 or not w.sync_blocks[y] else "sync_idle"
            host, back_to = _explain_host(w, sg_, ready, part)
            if host is None:
                reached = back_to
                cur = None
            else:
                cur = _execute(w, host[0], host[1])
        else:
            cur = None
    w.away = None
    w.add("other", w.lo, max(min(reached, w.hi), w.lo))
    late = [{"late_rank": r, "ns": int(ns),
             "cause": max(w.causes[r].items(), key=lambda kv: kv[1])[0] if w.causes[r] else ""}
            for r, ns in sorted(w.late.items(), key=lambda kv: -kv[1])]
    return {"parts": w.parts, "peer_wait": late, "nodes": np.asarray(w.nodes, dtype=np.int64)}  # 8 bytes a node


def merge_parts(items: list[dict[str, int]]) -> dict[str, int]:
    out = dict.fromkeys(ATTRIBUTION, 0)
    for d in items:
        for k, v in d.items():
            out[k] += int(v)
    return out


def mean_parts(items: list[dict[str, int]]) -> dict[str, int]:
    """Each part's mean over steps: the parts add up to the mean step (to rounding)."""
    return {k: int(round(float(np.mean([d[k] for d in items])))) if items else 0 for k in ATTRIBUTION}
