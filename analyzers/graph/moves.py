"""Fixes that move work: each one a new graph (the same activities, other edges and joins) plus inputs.

- ``prefetch[=N]``: each all-gather whose output compute consumes (an activity waits for it through a recorded
  stream wait) is issued N consumers ahead: its copy-in (the activities on the compute stream that it waits for,
  the run of one kernel just before it: FSDP's foreach copy) leaves the compute stream for a copy-in stream of
  its own (one per rank, in the same order), the compute stream's next activity follows what ran before the
  copy-in, and the copy-in waits only for the consumer of the all-gather N before it in the step (for the first
  N of a step: for what ran before it on the compute stream, the previous step's last update of the shards).
  The host issues the copy-in and the all-gather when it issued that consumer (their launch offsets, in one
  host segment). An all-gather's input is a shard of the parameters, which the step does not write before it
  (so nothing else gates it); a reduce-scatter's input is computed by the step and never moves.
- ``coalesce``: the send and receive of one ring step run as one kernel (``batch_isend_irecv``): on each rank,
  consecutive point-to-point kernels of one stream pair up (first with second, third with fourth); the
  second of each pair takes no time, its join is dissolved, and the first carries the longer of the two
  transfers after the join of its own collective (both directions of a link run at once).

What moves is read off the graph: which kernels consume a collective's output and which produce its input come
from the recorded stream waits (deps.py); where a trace has none, nothing moves and a note says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from analyzers.graph.contention import contended_replay
from analyzers.graph.fixes import Fix, ReplayInputs, apply_fixes
from analyzers.graph.rank_graph import CAT_CODES
from analyzers.graph.replay import Replay
from analyzers.graph.set_graph import SetGraph

MOVES = ("prefetch", "coalesce")
PREFETCH_KINDS = ("AllGather", "all_gather", "Broadcast")  # collectives whose input the step does not compute
P2P_KINDS = ("SendRecv", "Send", "Recv", "sendrecv")
SHARED_CACHES = ("_contention", "_step_groups", "_series_edges", "_residency")


@dataclass
class Moved:
    """The moved graph, the inputs to replay on it, and what the moves did (for the notes)."""

    sg: SetGraph
    inputs: ReplayInputs
    notes: list[str] = field(default_factory=list)


def _copy(sg: SetGraph, **changes) -> SetGraph:
    out = replace(sg, stream_order=None, **changes)
    for key in SHARED_CACHES:  # what depends on the activities alone, not on the moved edges
        if key in sg.__dict__:
            out.__dict__[key] = sg.__dict__[key]
    return out


def _names_of(sg: SetGraph) -> np.ndarray:
    return np.concatenate([np.asarray(sg.graphs[r].names, dtype=object)[sg.graphs[r].name_id] for r in sg.ranks])


def _of_kind(names: np.ndarray, kinds: tuple[str, ...]) -> np.ndarray:
    return np.asarray([any(k in str(n) for k in kinds) for n in names], dtype=bool)


def _copy_in(sg: SetGraph, names: np.ndarray, ag: int) -> list[int]:
    """The run of one kernel on the compute stream that the all-gather waits for, first to last."""
    d = int(sg.dep[ag])
    if d < 0 or sg.cat[d] == CAT_CODES["comm"]:
        return []
    group = [d]
    p = int(sg.prev[d])
    while p >= 0 and names[p] == names[d] and sg.dep[p] < 0:
        group.append(p)
        p = int(sg.prev[p])
    return group[::-1]


def _prefetch(sg: SetGraph, inp: ReplayInputs, depth: int, names: np.ndarray) -> tuple[SetGraph, list[str]]:
    prev, off, dep2 = sg.prev.copy(), inp.off, inp.dep2
    consumer = np.full(sg.n, -1, dtype=np.int64)
    waits = np.flatnonzero(sg.dep >= 0)
    consumer[sg.dep[waits][::-1]] = waits[::-1]  # the first activity that waits for each one
    ags = np.flatnonzero((sg.coll >= 0) & _of_kind(names, PREFETCH_KINDS))
    moved = 0
    last_copy_in: dict[int, int] = {}
    for r in sg.ranks:
        mine = ags[sg.rank_of[ags] == r]
        mine = mine[np.lexsort((sg.start[mine], sg.step[mine]))]
        for step in np.unique(sg.step[mine]).tolist():
            seq = [int(a) for a in mine[sg.step[mine] == step] if consumer[a] >= 0]
            for k, ag in enumerate(seq):
                group = _copy_in(sg, names, ag)
                if not group:
                    continue
                first, last = group[0], group[-1]
                before = int(prev[first])
                after = np.flatnonzero(prev == last)
                after = after[sg.rank_of[after] == r]
                for a in after.tolist():  # the compute stream closes the gap the copy-in leaves
                    prev[a] = before
                prev[first] = last_copy_in.get(r, -1)
                last_copy_in[r] = last
                gate = int(consumer[seq[k - depth]]) if k >= depth else before
                dep2[first] = gate
                if gate >= 0 and sg.seg[gate] == sg.seg[ag] and sg.seg[ag] >= 0:
                    for i in [*group, ag]:
                        off[i] = min(int(off[i]), int(off[gate]))
                moved += 1
    notes = [f"prefetch: {moved} all-gathers issued ahead of their consumers with their copy-in on a stream of its "
             "own" if moved else "prefetch: no all-gather waits for a copy-in and has a consumer that waits for it "
             "(recorded stream waits): nothing moved"]
    return _copy(sg, prev=prev), notes


def _coalesce(sg: SetGraph, inp: ReplayInputs, names: np.ndarray) -> tuple[SetGraph, list[str]]:
    p2p = (sg.coll >= 0) & _of_kind(names, P2P_KINDS)
    second = np.zeros(sg.n, dtype=bool)
    for r in sg.ranks:
        rows = np.flatnonzero(p2p & (sg.rank_of == r))
        rows = rows[np.argsort(sg.start[rows], kind="stable")]
        k = 0
        while k + 1 < len(rows):
            a, b = int(rows[k]), int(rows[k + 1])
            if sg.prev[b] == a:  # back to back on one stream: one exchange
                second[b] = True
                inp.dur[a] = max(int(inp.dur[a]), int(inp.dur[b]))
                inp.dur[b] = 0
                inp.off[b] = min(int(inp.off[b]), int(inp.off[a]))
                k += 2
            else:
                k += 1
    sizes = np.diff(sg.coll_ptr)
    member_second = second[sg.coll_nodes]
    gone = np.add.reduceat(member_second.astype(np.int64), sg.coll_ptr[:-1]) == sizes if len(sizes) else sizes
    gone &= sizes > 0
    keep_c = np.flatnonzero(~gone)
    remap = np.full(len(sizes), -1, dtype=np.int64)
    remap[keep_c] = np.arange(len(keep_c))
    coll = np.where(sg.coll >= 0, remap[np.maximum(sg.coll, 0)], -1)
    nodes = [sg.coll_nodes[sg.coll_ptr[c]:sg.coll_ptr[c + 1]] for c in keep_c.tolist()]
    ptr = np.r_[0, np.cumsum([len(x) for x in nodes])].astype(np.int64)
    cnodes = np.concatenate(nodes).astype(np.int64) if nodes else np.zeros(0, dtype=np.int64)
    dissolved = coll < 0
    inp.dur = np.where(dissolved & second, 0, inp.dur)
    mixed = int((second & (coll >= 0)).sum())
    notes = [f"coalesce: {int(gone.sum())} point-to-point exchanges merged into the one before them"
             + (f"; {mixed} second kernels whose collective also holds a first one stay joined" if mixed else "")]
    return _copy(sg, coll=coll, coll_ptr=ptr, coll_nodes=cnodes), notes


def apply_moves(sg: SetGraph, fixes: list[Fix]) -> Moved:
    """The moved graph and its inputs: the other fixes applied first (on the unmoved graph), then the moves."""
    inp = apply_fixes(sg, [f for f in fixes if f.name not in MOVES])
    names = _names_of(sg)
    out, notes = sg, []
    for fix in fixes:
        if fix.name == "prefetch":
            out, more = _prefetch(out, inp, int(fix.factor or 1), names)
        elif fix.name == "coalesce":
            out, more = _coalesce(out, inp, names)
        else:
            continue
        notes += more
    return Moved(out, inp, notes)


def moved_replay(run, fixes: list[Fix]) -> tuple[ReplayInputs, Replay]:
    """GraphRun.run for fixes that move work: the moved graph replayed with contention (its notes kept on the run;
    the moved graph has the same activities, so steps are read off the unmoved one)."""
    moved = apply_moves(run.sg, fixes)
    res = contended_replay(moved.sg, moved.inputs, run.order)
    run.__dict__.setdefault("move_notes", [])
    run.move_notes[:] = moved.notes
    if not res.converged:
        run.unsettled = True
    return res.inputs, res.replay
