"""Fixes that move work: each one a new graph (the same activities, other edges and joins) plus inputs.

- ``prefetch[=N]``: all-gathers issued N consumers ahead (graph.prefetch).
- ``comm-first``: communication dispatched before the GPU-filling compute it waited behind (a gate kernel).
- ``agreed-order``: every rank runs its compute kernels in the leader's order of streams (graph.agreed_order).
- ``coalesce``: the send and receive of one ring step run as one kernel (``batch_isend_irecv``): each rank's
  back-to-back point-to-point kernels pair up, the first carrying both directions on NCCL's split of its
  warps (graph.coalesce).

What moves is read off the graph: which kernels consume a collective's output and which produce its input come
from the CPU op tree's FSDP module ranges (graph.dataflow) where the trace has them, else from the recorded stream
waits (deps.py); where a trace has neither, nothing moves and a note says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from analyzers.graph.agreed_order import agreed_order
from analyzers.graph.coalesce import coalesce
from analyzers.graph.contention import contended_replay
from analyzers.graph.fixes import Fix, ReplayInputs, apply_fixes
from analyzers.graph.prefetch import PREFETCH_KINDS, StreamPlan, prefetch, topological_keys
from analyzers.graph.rank_graph import CAT_CODES
from analyzers.graph.replay import Replay, loop_order
from analyzers.graph.set_graph import SetGraph

MOVES = ("prefetch", "coalesce", "comm-first", "agreed-order")
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


def _comm_first(sg: SetGraph, inp: ReplayInputs) -> tuple[SetGraph, list[str]]:
    """Communication dispatched before the GPU-filling compute it waited behind (a gate kernel the compute waits for).

    A communication kernel whose start only an inferred edge explains (deps.py: it started when a compute kernel
    of another stream released SMs) waits instead for what that compute kernel waited for on its stream (it is
    ready when the compute kernel would be) and comes before it in the replay's order (SM residency then never
    holds it back behind it); the compute kernel waits for what ran before the communication on its stream, as
    it would for a small gate kernel there."""
    comm, comp = sg.cat == CAT_CODES["comm"], sg.cat == CAT_CODES["compute"]
    cand = np.flatnonzero(comm & (inp.dep >= 0) & (sg.dep_lat != 0))
    held = inp.dep[cand]
    ok = comp[held] & (sg.rank_of[held] == sg.rank_of[cand]) & (sg.start[held] < sg.start[cand])
    cand, held = cand[ok], held[ok]
    plan = StreamPlan(sg, inp)
    dep_lat = sg.dep_lat.copy()
    gated = 0
    for c, h in zip(cand.tolist(), held.tolist(), strict=True):
        inp.dep[c] = int(sg.prev[h])  # ready when the compute kernel would have been: dispatched just before it
        dep_lat[c] = int(sg.turnaround[h])
        plan.key[c] = min(int(plan.key[c]), int(plan.key[h]) - 1)
        p = int(sg.prev[c])
        if p >= 0 and inp.dep2[h] < 0:
            inp.dep2[h] = p
            gated += 1
    dropped = topological_keys(plan, inp)
    note = (f"comm-first: {len(cand)} communication kernels dispatched before the compute kernel they waited behind"
            f" ({gated} of those compute kernels wait for the communication stream)" if len(cand) else
            "comm-first: no communication kernel waited for a compute kernel to free the GPU: nothing moved")
    if dropped:
        note += f"; {dropped} waits that would point back in the replay's order dropped"
    return _copy(sg, order_key=plan.key, dep_lat=dep_lat), [note]


def apply_moves(sg: SetGraph, fixes: list[Fix]) -> Moved:
    """The moved graph and its inputs: the other fixes applied first (on the unmoved graph), then the moves."""
    inp = apply_fixes(sg, [f for f in fixes if f.name not in MOVES])
    names = _names_of(sg)
    out, notes = sg, []
    for fix in fixes:
        if fix.name == "prefetch":
            prev, key, more = prefetch(out, inp, int(fix.factor or 1), names, _of_kind(names, PREFETCH_KINDS))
            out = _copy(out, prev=prev, order_key=key)
        elif fix.name == "coalesce":
            changes, more = coalesce(out, inp, names)
            out = _copy(out, **changes)
        elif fix.name == "comm-first":
            out, more = _comm_first(out, inp)
        elif fix.name == "agreed-order":
            changes, more = agreed_order(out, inp)
            out = _copy(out, **changes)
        else:
            continue
        notes += more
    return Moved(out, inp, notes)


def moved_replay(run, fixes: list[Fix]) -> tuple[ReplayInputs, Replay]:
    """GraphRun.run for fixes that move work: the moved graph replayed with contention (its notes kept on the run;
    the moved graph has the same activities, so steps are read off the unmoved one)."""
    moved = apply_moves(run.sg, fixes)
    order = run.order if moved.sg.order_key is run.sg.order_key else loop_order(moved.sg)
    res = contended_replay(moved.sg, moved.inputs, order)
    run.__dict__.setdefault("move_notes", [])
    run.move_notes[:] = moved.notes
    if not res.converged:
        run.unsettled = True
    return res.inputs, res.replay
