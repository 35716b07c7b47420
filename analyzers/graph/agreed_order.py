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


def _measured_series(sg: SetGraph, rows: np.ndarray) -> np.ndarray:
    """A rank's compute kernels (all steps, and those outside any) in the order the GPU started them."""
    rows = np.flatnonzero(rows)
    return rows[np.argsort(sg.start[rows], kind="stable")]


def _join_neighbours(inp: ReplayInputs, stream: np.ndarray, series: np.ndarray, mine: np.ndarray,
                     new: list[int]) -> int:
    """Keep a reordered step's kernels in series with the compute kernels before and after it on the rank: its new
    first kernel waits for the kernel that ran before the step's first (another stream's: without that wait it
    ran beside the previous step's last GEMM, and the step began before its predecessor ended), and the kernel
    after the step waits for its new last one, where they run on different streams. Returns the kernel before the
    step (-1: none)."""
    first, last = (int(np.flatnonzero(series == x)[0]) for x in (mine[0], mine[-1]))
    before = int(series[first - 1]) if first > 0 else -1
    if before >= 0:
        if stream[before] != stream[new[0]] and inp.dep2[new[0]] < 0:
            inp.dep2[new[0]] = before
    if last + 1 < len(series):
        after = int(series[last + 1])
        if stream[after] != stream[new[-1]] and (inp.dep2[after] < 0 or inp.dep2[after] == mine[-1]):
            inp.dep2[after] = new[-1]
        elif stream[after] == stream[new[-1]] and inp.dep2[after] == mine[-1] != new[-1]:
            inp.dep2[after] = -1  # its stream's order keeps it behind the new last kernel
    return before


def _repoint_back_waits(sg: SetGraph, inp: ReplayInputs, key: np.ndarray, dep_lat: np.ndarray, rank: int, step: int,
                        new: list[int], before: int) -> int:
    """The step's other activities whose wait names one of its reordered kernels that now runs after them (a
    memset ahead of its stream's GEMM, inferred to wait on the other stream's GEMM that the recorded order starts
    first) wait instead for the kernel before the step, at its end: dropped, the memset ran a step early and
    opened the step there (a 3.3 ms step replayed at 5.5 ms). Returns how many."""
    rows = np.flatnonzero((sg.rank_of == rank) & (sg.step == step) & np.isin(inp.dep, new) & ~np.isin(
        np.arange(sg.n), new))
    rows = rows[key[inp.dep[rows]] > key[rows]]
    inp.dep[rows], dep_lat[rows] = before, 0
    return len(rows)


def agreed_order(sg: SetGraph, inp: ReplayInputs) -> tuple[dict[str, np.ndarray], list[str]]:
    """The moved graph's changes (new ordering keys, wait latencies; inp's series edges and waits changed in place)
    and the note."""
    serial = _serial_compute_ranks(sg)
    if len(serial) < 2:
        return {}, ["agreed-order: fewer than two ranks run their compute kernels one at a time: "
                              "nothing reordered"]
    stream = _stream_numbers(sg)
    comp = (sg.cat == CAT_CODES["compute"]) & np.isin(sg.rank_of, serial) & (sg.step >= 0)
    leader = serial[0]
    plan = StreamPlan(sg, inp)
    moved = kept = repointed = 0
    dep_lat = sg.dep_lat.copy()
    tails = compute_tails(sg)
    series: list[tuple[int, int]] = []  # (kernel, the one before it in the new order) where that one's tail is known
    every = (sg.cat == CAT_CODES["compute"]) & np.isin(sg.rank_of, serial)
    series_of = {r: _measured_series(sg, every & (sg.rank_of == r)) for r in serial[1:]}
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
            before = _join_neighbours(inp, stream, series_of[r], mine, new)
            repointed += _repoint_back_waits(sg, inp, plan.key, dep_lat, r, step, new, before)
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
    if repointed:
        note += (f"; {repointed} of their steps' other activities that waited for a kernel now run after them wait "
                 "for the kernel before the step")
    if dropped:
        note += f"; {dropped} waits that would point back in the replay's order dropped"
    return {"order_key": plan.key, "dep_lat": dep_lat}, [note]
