"""The `agreed-order` fix: every rank runs its GPU-filling compute kernels, stream by stream, in the leader's order.

On a rank whose compute kernels never ran side by side, the replay keeps them in series in their measured order
(fixes._compute_in_series): which stream's kernel the GPU started first is that rank's order. Where two ranks
start their streams' kernels in different orders, the collectives and barriers that follow each kernel on its
stream reach their cross-rank joins at different times, and each rank waits for the other (PyTorch's
symmetric-memory two-stream pipeline: a sleep kernel on one stream makes every rank start the same stream first).

Per step, each other rank's compute kernels are put in the leader's (lowest rank's) sequence of streams, each
stream's own kernels keeping their order: the i-th kernel of the leader's order runs on stream S, so the
other rank runs its next kernel of stream S there. The series edges follow the new order, each kernel takes the
ordering key of the slot it fills, and the graph's order is recomputed (Kahn's order, graph.prefetch). A kernel
whose new predecessor fills the GPU, where the trace shows a compute kernel of another stream that cannot fit
beside it starting inside it (its first blocks retire a tail before its end: one round of a GEMM's tiles),
starts that tail before the predecessor's end, as an SM gate (graph.residency), rather than at its end. Streams
are matched across ranks by their stream number; a step whose streams or counts differ from the leader's keeps
its order (the note counts those).
"""

from __future__ import annotations

import re

import numpy as np

from analyzers.graph.fixes import ReplayInputs, _serial_compute_ranks
from analyzers.graph.prefetch import StreamPlan, topological_keys
from analyzers.graph.rank_graph import CAT_CODES
from analyzers.graph.residency import residency
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


def compute_tails(sg: SetGraph) -> np.ndarray:
    """Per compute node: the longest time before its end that a compute kernel of another stream of its rank, one
    that could not fit beside its blocks (graph.residency: it fills the GPU), was seen to start inside it (its
    first blocks to retire free SMs for the next one), by rank and name; 0 where none was."""
    rs = residency(sg)
    comp = np.flatnonzero(sg.cat == CAT_CODES["compute"])
    name = np.concatenate([sg.graphs[r].name_id for r in sg.ranks]) if sg.ranks else np.zeros(0, dtype=np.int64)
    key = sg.rank_of * (1 << 32) + name
    seen: dict[int, int] = {}
    for r in np.unique(sg.rank_of[comp]).tolist():
        if r not in rs.blocked:
            continue
        rows = comp[sg.rank_of[comp] == r]
        rows = rows[np.argsort(sg.start[rows], kind="stable")]
        for k, x in zip(rows[:-1].tolist(), rows[1:].tolist(), strict=True):
            if (rs.holder[k] and rs.res[x] >= 0 and rs.blocked[r][rs.res[x], rs.res[k]] and rs.stream[k] != rs.stream[x]
                    and sg.start[k] < sg.start[x] < sg.end[k] < sg.end[x]):
                seen[int(key[k])] = max(seen.get(int(key[k]), 0), int(sg.end[k] - sg.start[x]))
    out = np.zeros(sg.n, dtype=np.int64)
    if seen:
        out[comp] = [seen.get(int(kk), 0) for kk in key[comp].tolist()]
    return out


def _start_in_tails(inp: ReplayInputs, tails: np.ndarray, series: list[tuple[int, int]]) -> int:
    """Turn the new series edges whose source's tail is known into SM gates (after the ordering keys are made:
    they keep the source first): the kernel gets SMs as the source's first blocks retire, its tail before its
    end, as the trace shows it doing. Returns how many."""
    kept = [(b, a) for b, a in series if inp.dep2[b] == a]
    if not kept:
        return 0
    gate = inp.gate.copy() if inp.gate is not None else np.full(len(inp.dur), -1, dtype=np.int64)
    gate_lat = inp.gate_lat.copy() if inp.gate_lat is not None else np.zeros(len(inp.dur), dtype=np.int64)
    b, a = (np.asarray(x, dtype=np.int64) for x in zip(*kept, strict=True))
    gate[b], gate_lat[b], inp.dep2[b] = a, -tails[a], -1
    inp.gate, inp.gate_lat = gate, gate_lat
    return len(b)


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
    tails = compute_tails(sg)
    series: list[tuple[int, int]] = []  # (kernel, the one before it in the new order) where that one's tail is known
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
                if stream[a] != stream[b] and tails[a] > 0:
                    series.append((b, a))
            inp.dep2[new[0]] = -1 if inp.dep2[new[0]] in set(new) else inp.dep2[new[0]]
            moved += 1
    dropped = topological_keys(plan, inp)
    tailed = _start_in_tails(inp, tails, series)
    note = (f"agreed-order: {moved} rank-steps run their compute kernels in rank {leader}'s order of streams"
            if moved else "agreed-order: every rank already runs its compute kernels in the leader's order")
    if tailed:
        note += (f"; {tailed} of their kernels start in the tail of the GPU-filling one before them, as the trace "
                 f"shows them doing (up to {tails.max() / 1e3:.1f} µs before its end)")
    if kept:
        note += f"; {kept} rank-steps whose streams differ from the leader's keep theirs"
    if dropped:
        note += f"; {dropped} waits that would point back in the replay's order dropped"
    return plan.key, [note]
