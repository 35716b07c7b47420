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


class _Walk:
    """Accumulates the attribution of one rank's step while the path is walked back."""

    def __init__(self, sg: SetGraph, rank: int, lo: int, hi: int) -> None:
        self.sg, self.rank, self.lo, self.hi = sg, rank, lo, hi
        self.parts: dict[str, int] = dict.fromkeys(ATTRIBUTION, 0)
        self.late: dict[int, int] = defaultdict(int)
        self.causes: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.away: int | None = None  # the late rank while the path runs on another rank
        self.nodes: list[int] = []
        self.frontier = hi  # the path is walked back in time: everything after this is attributed

    def add(self, part: str, a: int, b: int, label: str = "") -> None:
        """Attribute [a, b) to part, less what the walk already attributed (each ns counts once)."""
        a, b = max(a, self.lo), min(b, self.hi, self.frontier)
        if b <= a:
            return
        self.frontier = a
        if self.away is None:
            self.parts[part] += b - a
        else:
            self.parts["peer_wait"] += b - a
            self.late[self.away] += b - a
            self.causes[self.away][f"{part}: {label}" if label else part] += b - a


def _execute(w: _Walk, rp: Replay, i: int, t: int) -> tuple[int, int] | None:
    """Attribute node i's run below time t; return (node, time) whose start explains it next."""
    sg = w.sg
    if w.away is None and int(sg.rank_of[i]) != w.rank:
        w.away = int(sg.rank_of[i])
    elif w.away is not None and int(sg.rank_of[i]) == w.rank:
        w.away = None
    w.nodes.append(i)
    s, e = int(rp.start[i]), min(int(rp.end[i]), t)
    label = sg.node_label(i)
    c = int(sg.coll[i])
    if c >= 0:
        a = max(int(rp.arrival[c]), s)
        w.add("comm_transfer", a, e, label)
        q = int(rp.late[c])
        if q >= 0 and q != i and a > s:
            return _execute_arrival(w, rp, q, a)
        w.add("comm_transfer", s, min(a, e), label)
        return i, s
    w.add(_CAT_PART[int(sg.cat[i])], s, e, label)
    return i, s


def _execute_arrival(w: _Walk, rp: Replay, q: int, t: int) -> tuple[int, int]:
    """The path reaches collective member q (another rank's) at its arrival t."""
    r = int(w.sg.rank_of[q])
    if w.away is None and r != w.rank:
        w.away = r
    elif r == w.rank:
        w.away = None
    w.nodes.append(q)
    s = int(rp.start[q])
    w.add("other", s, t)
    return q, s


def _explain_host(w: _Walk, rp: Replay, inp: ReplayInputs, seg: int, t: int,
                  part: str) -> tuple[tuple[int, int] | None, int]:
    """The host segment seg reached the time t; walk the host back to the GPU work it waited for.

    Returns that work (node, time), or None where the host's chain ends, and how far back the walk
    attributed time (what is left before it is the step's unexplained start).
    """
    sg = w.sg
    for _ in range(MAX_STEPS_WALKED):
        base = int(rp.seg_time[seg])
        y = int(sg.seg_opened_by[seg])
        w.add("sync_idle" if y >= 0 and inp.sync_blocks[y] else part, base, t)
        if y < 0 or base <= w.lo:
            return None, base
        call, res = int(rp.sync_call[y]), int(rp.sync_resume[y])
        if inp.sync_blocks[y] and rp.sync_gpu_bound[y]:
            a = int(sg.sync_awaited[y])
            w.add("sync_idle", int(rp.end[a]), res)
            return (a, int(rp.end[a])), int(rp.end[a])
        w.add("sync_idle" if inp.sync_blocks[y] else part, call, res)
        seg, t = int(sg.sync_seg[y]), call
        if seg < 0:
            return None, call
    return None, t


def walk(sg: SetGraph, rp: Replay, inp: ReplayInputs, rank: int, lo: int, hi: int, node: int,
         at_end: bool) -> dict[str, Any]:
    """Attribution of [lo, hi) on rank's path ending at node's end (at_end) or start."""
    w = _Walk(sg, rank, lo, hi)
    cur: tuple[int, int] | None = _execute(w, rp, node, hi) if at_end else (node, int(rp.start[node]))
    reached = hi
    dep, dep2 = inp.dep, inp.dep2
    for _ in range(MAX_STEPS_WALKED):
        if cur is None:
            break
        i, t = cur
        reached = t
        if t <= lo:
            break
        why = int(rp.why[i])
        if why == STREAM:
            p = int(sg.prev[i])
            w.add("other", int(rp.end[p]), t)
            cur = _execute(w, rp, p, min(t, int(rp.end[p])))
        elif why in (DEP, DEP2, GATE):
            p = int(dep[i] if why == DEP else dep2[i] if why == DEP2 else inp.gate[i])  # type: ignore[index]
            w.add("other", int(rp.end[p]), t)
            cur = _execute(w, rp, p, min(t, int(rp.end[p])))
        elif why == LAUNCH:
            s = int(sg.seg[i])
            ready = int(rp.seg_time[s]) + int(inp.off[i])
            w.add("launch_gaps", ready, t)
            y = int(sg.seg_opened_by[s])
            part = "launch_gaps" if y < 0 or not inp.sync_blocks[y] else "sync_idle"
            host, back_to = _explain_host(w, rp, inp, s, ready, part)
            if host is None:
                reached = back_to
                cur = None
            else:
                cur = _execute(w, rp, host[0], host[1])
        else:
            cur = None
    w.away = None
    w.add("other", lo, max(min(reached, hi), lo))
    late = [{"late_rank": r, "ns": int(ns),
             "cause": max(w.causes[r].items(), key=lambda kv: kv[1])[0] if w.causes[r] else ""}
            for r, ns in sorted(w.late.items(), key=lambda kv: -kv[1])]
    return {"parts": w.parts, "peer_wait": late, "nodes": w.nodes}


def merge_parts(items: list[dict[str, int]]) -> dict[str, int]:
    out = dict.fromkeys(ATTRIBUTION, 0)
    for d in items:
        for k, v in d.items():
            out[k] += int(v)
    return out


def mean_parts(items: list[dict[str, int]]) -> dict[str, int]:
    """Each part's mean over steps: the parts add up to the mean step (to rounding)."""
    return {k: int(round(float(np.mean([d[k] for d in items])))) if items else 0 for k in ATTRIBUTION}
