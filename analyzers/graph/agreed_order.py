"""The `agreed-order` fix: every rank runs its GPU-filling compute kernels, stream by stream, in the leader's order.

On a rank whose compute kernels never ran side by side, the replay keeps them in series in their measured order
(fixes._compute_in_series): which stream's kernel the GPU started first is that rank's order. Where two ranks
start their streams' kernels in different orders, the collectives and barriers that follow each kernel on its
stream reach their cross-rank joins at different times, and each rank waits for the other (PyTorch's
symmetric-memory two-stream pipeline: a sleep kernel on one stream makes every rank start the same stream first).

Per step, each other rank's compute kernels are put in the leader's (lowest rank's) sequence of streams, each
stream's own kernels keeping their order: the i-th kernel of the leader's order runs on stream S, so the
other rank runs its next kernel of stream S there. The series edges follow the new order, each kernel takes the
ordering key of the slot it fills, and the graph's order is recomputed (Kahn's order, graph.prefetch). Streams
are matched across ranks by their stream number; a step whose streams or counts differ from the leader's keeps
its order (the note counts those).
"""

from __future__ import annotations

import re

import numpy as np

from analyzers.graph.fixes import ReplayInputs, _serial_compute_ranks
from analyzers.graph.prefetch import StreamPlan, topological_keys
from analyzers.graph.rank_graph import CAT_CODES
from analyzers.graph.set_graph import SetGraph

_STREAM = re.compile(r"stream (-?\d+)$")


def _stream_numbers(sg: SetGraph) -> np.ndarray:
    """Per node: its stream's number as the trace names it (matched across ranks; devices differ)."""
    out = []
    for r in sg.ranks:
        g = sg.graphs[r]
        nums = np.asarray([int(m.group(1)) if (m := _STREAM.search(lb)) else -1 - i
                           for i, lb in enumerate(g.stream_labels)], dtype=np.int64)
        out.append(nums[g.stream] if len(nums) else np.full(g.n, -1, dtype=np.int64))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def agreed_order(sg: SetGraph, inp: ReplayInputs) -> tuple[np.ndarray, list[str]]:
    """New ordering keys (inp's series edges changed in place) and the note."""
    serial = _serial_compute_ranks(sg)
    if len(serial) < 2:
        return sg.order_key, ["agreed-order: fewer than two ranks run their compute kernels one at a time: "
                              "nothing reordered"]
    stream = _stream_numbers(sg)
    comp = (sg.cat == CAT_CODES["compute"]) & np.isin(sg.rank_of, serial) & (sg.step >= 0)
    leader = serial[0]
    plan = StreamPlan(sg, inp)
    moved = kept = 0
    for step in np.unique(sg.step[comp]).tolist():
        lead = np.flatnonzero(comp & (sg.rank_of == leader) & (sg.step == step))
        lead = lead[np.argsort(sg.start[lead], kind="stable")]
        want = stream[lead].tolist()
        for r in serial[1:]:
            mine = np.flatnonzero(comp & (sg.rank_of == r) & (sg.step == step))
            mine = mine[np.argsort(sg.start[mine], kind="stable")]
            if sorted(stream[mine].tolist()) != sorted(want):
                kept += 1
                continue
            queues = {s: [int(x) for x in mine[stream[mine] == s]] for s in set(want)}
            new = [queues[s].pop(0) for s in want]
            if new == mine.tolist():
                continue
            slots = np.sort(sg.order_key[mine])
            plan.key[new] = slots
            for a, b in zip(new[:-1], new[1:], strict=True):
                inp.dep2[b] = a if stream[a] != stream[b] else -1
            inp.dep2[new[0]] = -1 if inp.dep2[new[0]] in set(new) else inp.dep2[new[0]]
            moved += 1
    dropped = topological_keys(plan, inp)
    note = (f"agreed-order: {moved} rank-steps run their compute kernels in rank {leader}'s order of streams"
            if moved else "agreed-order: every rank already runs its compute kernels in the leader's order")
    if kept:
        note += f"; {kept} rank-steps whose streams differ from the leader's keep theirs"
    if dropped:
        note += f"; {dropped} waits that would point back in the replay's order dropped"
    return plan.key, [note]
