"""The `prefetch[=N]` fix: each all-gather whose output compute consumes is issued N consumers ahead.

Per rank and step, for each all-gather (or broadcast) with a consumer, in the order the consumers run:

- where the CPU op tree names modules (graph.dataflow: FSDP's ``all_gather (M)``, ``all_gather_copy_out (M)``
  and ``pre_forward (M)`` ranges): its copy-in is M's activities in its all_gather range (one run of one
  stream), its consumer M's first compute after it, its copy-out M's copy-out activities, which move on the
  compute stream to just before the consumer where they sat elsewhere (front-loaded: at the front); a
  copy-out waits for its own module's all-gather and an all-gather for its own copy-in, whatever the
  inferred wait source was. Elsewhere: the copy-in is the run of one kernel on another stream that the
  all-gather waits for, the consumer the first activity that waits for it;
- the copy-in leaves the compute stream for a copy-in stream of the rank (in the consumers' order), the
  compute stream's next activity follows what ran before it; the copy-in waits for the consumer of the
  all-gather N before it (the first N of a step: for what ran before it on the compute stream, past the
  work that moves), and a copy-in's wait for the all-gather d before it (FSDP2 keeps two in flight) keeps
  that distance in the new order; the host issues the copy-in and the all-gather when it issued that
  consumer (their launch offsets, in one host segment);
- the all-gathers run on their stream in their consumers' order (a front-loaded step issued the root
  module's last, though the forward reads it first).

The moved graph gets new ordering keys (Kahn's order over its edges, the measured keys as priority) so that
the replay's one pass stays topological; where the moves close a cycle, the waits in it are dropped and
counted in the note.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from analyzers.graph.dataflow import BACKWARD, COPY_OUT, FORWARD, GATHER
from analyzers.graph.et_roles import ET_MODULE_PREFIX
from analyzers.graph.fixes import ReplayInputs, own
from analyzers.graph.rank_graph import CAT_CODES
from analyzers.graph.set_graph import SetGraph

PREFETCH_KINDS = ("AllGather", "all_gather", "Broadcast")  # collectives whose input the step does not compute


@dataclass
class _Roles:
    role: np.ndarray
    module: np.ndarray  # set-wide: rank-local module ids offset so no two ranks share one
    from_et: np.ndarray  # bool: the role came from an Execution Trace (graph.et_roles), not the op tree's ranges


def _roles(sg: SetGraph) -> _Roles:
    role, module, et = [], [], []
    shift = 0
    for r in sg.ranks:
        g = sg.graphs[r]
        has = len(g.role) == g.n
        role.append(g.role if has else np.zeros(g.n, dtype=np.int8))
        m = g.module if has else np.full(g.n, -1, dtype=np.int64)
        module.append(np.where(m >= 0, m + shift, -1))
        named = np.asarray([x.startswith(ET_MODULE_PREFIX) for x in g.modules] + [False], dtype=bool)
        et.append(named[m] if len(g.modules) else np.zeros(g.n, dtype=bool))
        shift += len(g.modules) + 1
    return _Roles(np.concatenate(role), np.concatenate(module), np.concatenate(et))


def _copy_in(sg: SetGraph, names: np.ndarray, ag: int, roles: _Roles) -> list[int]:
    """The copy-in the all-gather reads, first to last: where the op tree names the module, its activities launched
    in the module's all_gather range on one other stream; else the run of one kernel on another stream that the
    all-gather waits for (a recorded wait names the last activity launched before it, which need not be the
    copy-in's own)."""
    m = int(roles.module[ag])
    if m >= 0:
        mine = np.flatnonzero((roles.module == m) & (roles.role == GATHER) & (sg.cat != CAT_CODES["comm"])
                              & (sg.step == sg.step[ag]))
        mine = mine[np.argsort(sg.start[mine])]
        run = [int(x) for x in mine]
        if run and all(int(sg.prev[b]) == a for a, b in zip(run[:-1], run[1:], strict=True)):  # one run of a stream
            return run
    d = int(sg.dep[ag])
    if d < 0 or sg.cat[d] == CAT_CODES["comm"]:
        return []
    group = [d]
    p = int(sg.prev[d])
    # a copy-in may itself wait for an earlier all-gather (FSDP2 keeps two in flight): that wait moves with it
    while p >= 0 and names[p] == names[d] and roles.module[p] == roles.module[d] and (
            sg.dep[p] < 0 or sg.cat[sg.dep[p]] == CAT_CODES["comm"]):
        group.append(p)
        p = int(sg.prev[p])
    return group[::-1]


def _own_gathers(sg: SetGraph, roles: _Roles, dep: np.ndarray) -> None:
    """A recorded wait names the latest activity launched before it on another stream; where all-gathers were
    launched back to back (front-loaded), a module's copy-out seems to wait for a later module's all-gather. Where
    the op tree names the copy-out's module, it waits for that module's all-gather (the last one before it)."""
    comm = sg.cat == CAT_CODES["comm"]
    outs = np.flatnonzero((roles.role == COPY_OUT) & (roles.module >= 0) & (dep >= 0))
    outs = outs[comm[dep[outs]] & (roles.module[dep[outs]] != roles.module[outs])]
    ags = np.flatnonzero(comm & (roles.role == GATHER) & (roles.module >= 0))
    for x in outs.tolist():
        own = ags[(roles.module[ags] == roles.module[x]) & (sg.step[ags] == sg.step[x]) & (sg.start[ags] < sg.start[x])]
        if len(own):
            dep[x] = int(own[np.argmax(sg.start[own])])


def _unmoved_before(sg: SetGraph, i: int, moving: set[int], role: np.ndarray) -> int:
    """What ran before i on its stream, past the work that moves and other all-gathers' copy-ins and copy-outs."""
    p = int(sg.prev[i])
    while p in moving or (p >= 0 and role[p] in (GATHER, COPY_OUT)):
        p = int(sg.prev[p])
    return p


class StreamPlan:
    """The new stream order, gates and keys, built one all-gather at a time."""

    def __init__(self, sg: SetGraph, inp: ReplayInputs) -> None:
        self.sg, self.inp = sg, inp
        self.prev, self.key = sg.prev.copy(), sg.order_key.copy()
        self.nxt = np.full(sg.n, -1, dtype=np.int64)
        has = np.flatnonzero(sg.prev >= 0)
        self.nxt[sg.prev[has]] = has
        self.moved = np.zeros(sg.n, dtype=bool)

    def unlink(self, group: list[int]) -> int:
        """Take a run out of its stream; return what ran before it."""
        first, last = group[0], group[-1]
        before, after = int(self.prev[first]), int(self.nxt[last])
        if after >= 0:
            self.prev[after] = before
        if before >= 0:
            self.nxt[before] = after
        self.prev[first], self.nxt[last] = -1, -1
        return before

    def insert_before(self, group: list[int], node: int) -> None:
        before = int(self.prev[node])
        self.prev[group[0]] = before
        if before >= 0:
            self.nxt[before] = group[0]
        self.prev[node], self.nxt[group[-1]] = group[-1], node
        self.key[group] = self.key[node]
        self.moved[group] = True

    def reorder(self, ags: list[int]) -> int:
        """Put these activities of one stream in this order, where the first of them sat; how many moved."""
        if len(ags) < 2 or len({int(self.sg.rank_of[a]) for a in ags}) > 1:
            return 0
        measured = sorted(ags, key=lambda a: int(self.key[a]))
        if measured == ags or any(self.prev[a] < 0 and a != measured[0] for a in ags):
            return 0
        anchor = int(self.prev[measured[0]])
        for a in ags:
            self.unlink([a])
        after = int(self.nxt[anchor]) if anchor >= 0 else -1
        chain = [anchor, *ags]
        for p, a in zip(chain[:-1], chain[1:], strict=True):
            self.prev[a] = p
            if p >= 0:
                self.nxt[p] = a
        if after >= 0:
            self.prev[after], self.nxt[ags[-1]] = ags[-1], after
        return sum(a != b for a, b in zip(ags, measured, strict=True))

    def append(self, group: list[int], after: int) -> None:
        self.prev[group[0]] = after
        if after >= 0:
            self.nxt[after] = group[0]


def _consumer(sg: SetGraph, roles: _Roles, waiter: np.ndarray, ag: int) -> tuple[int, list[int]]:
    """The all-gather's consumer and its copy-out (module roles where the op tree names them, else the first
    activity waiting for it)."""
    m = int(roles.module[ag])
    if m >= 0 and roles.role[ag] == GATHER:
        mine = np.flatnonzero((roles.module == m) & (sg.step == sg.step[ag]) & (sg.start > sg.start[ag]))
        use = mine[np.isin(roles.role[mine], (FORWARD, BACKWARD)) & (sg.cat[mine] == CAT_CODES["compute"])]
        if len(use):
            c = int(use[np.argmin(sg.start[use])])
            out = mine[(roles.role[mine] == COPY_OUT) & (sg.start[mine] < sg.start[c])]
            out = out[np.argsort(sg.start[out])]
            return c, [int(x) for x in out]
    return int(waiter[ag]), []


def prefetch(sg: SetGraph, inp: ReplayInputs, depth: int, names: np.ndarray,
             of_kind: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """New prev and order keys (inp's gates, launch offsets and dropped edges changed in place) and notes."""
    roles = _roles(sg)
    waiter = np.full(sg.n, -1, dtype=np.int64)
    _own_gathers(sg, roles, inp.dep)
    waits = np.flatnonzero(inp.dep >= 0)
    waiter[inp.dep[waits][::-1]] = waits[::-1]  # the first activity that waits for each one
    plan = StreamPlan(sg, inp)
    ags = np.flatnonzero((sg.coll >= 0) & of_kind)
    moved = by_ops = kept = 0
    source = {"the Execution Trace": 0, "FSDP module ranges": 0, "recorded stream waits": 0}
    for r in sg.ranks:
        mine = ags[sg.rank_of[ags] == r]
        mine = mine[np.lexsort((sg.start[mine], sg.step[mine]))]
        tail = -1  # the rank's copy-in stream
        for step in np.unique(sg.step[mine]).tolist():
            seq = [(int(a), *_consumer(sg, roles, waiter, int(a))) for a in mine[sg.step[mine] == step]]
            seq = [s for s in seq if s[1] >= 0]
            # the prefetching program issues the all-gathers in the order their consumers run
            seq.sort(key=lambda x: int(sg.order_key[x[1]]))
            measured_pos = {a: i for i, a in enumerate(sorted((x[0] for x in seq), key=lambda a: int(sg.order_key[a])))}
            kept += plan.reorder([x[0] for x in seq])
            groups = [_copy_in(sg, names, ag, roles) for ag, _, _ in seq]
            moving = {x for g in groups for x in g} | {x for _, _, outs in seq for x in outs}
            gates = [seq[k - depth][1] if k >= depth else (_unmoved_before(sg, g[0], moving, roles.role) if g else -1)
                     for k, g in enumerate(groups)]
            # an all-gather moves where it has a copy-in and its gate comes before its consumer
            go = [bool(g) and (gate < 0 or sg.order_key[gate] < sg.order_key[c])
                  for g, gate, (_, c, _) in zip(groups, gates, seq, strict=True)]
            for k, (ag, cons, outs) in enumerate(seq):
                if not go[k]:
                    continue
                group, gate = groups[k], gates[k]
                for x in group:  # a wait on the all-gather d before (in flight) keeps its distance in the new order
                    w = int(inp.dep[x])
                    if w >= 0 and w in measured_pos:
                        back = measured_pos[ag] - measured_pos[w]
                        inp.dep[x] = seq[k - back][0] if 0 < back <= k else -1
                plan.unlink(group)
                if roles.module[ag] >= 0 and int(inp.dep[ag]) not in group:  # the op tree names its copy-in:
                    inp.dep[ag] = group[-1]  # the recorded wait's source was only the last launched before it
                plan.append(group, tail)
                tail = group[-1]
                if outs and plan.prev[cons] != outs[-1]:
                    plan.unlink(outs)
                    plan.insert_before(outs, cons)
                    by_ops += 1
                inp.dep2[group[0]] = gate
                if gate >= 0:
                    lifted = plan.key[gate] + 1 + np.arange(len(group) + 1)
                    plan.key[[*group, ag]] = np.maximum(plan.key[[*group, ag]], lifted)
                    if sg.seg[gate] == sg.seg[ag] and sg.seg[ag] >= 0:
                        own(inp, "off")[[*group, ag]] = np.minimum(inp.off[[*group, ag]], inp.off[gate])
                plan.moved[[*group, ag]] = True
                moved += 1
                source["the Execution Trace" if roles.from_et[ag] else "FSDP module ranges" if roles.module[ag] >= 0
                       else "recorded stream waits"] += 1
    dropped = topological_keys(plan, inp)
    if not moved:
        return plan.prev, plan.key, ["prefetch: no all-gather waits for a copy-in and has a consumer that waits for "
                                     "it (recorded stream waits, FSDP module ranges): nothing moved"]
    note = f"prefetch: {moved} all-gathers issued ahead of their consumers with their copy-in on a stream of its own"
    note += " (consumers from " + ", ".join(f"{k}: {v}" for k, v in source.items() if v) + ")"
    if kept:
        note += f"; {kept} issued in a new order on their stream (their consumers' order)"
    if by_ops:
        note += f"; {by_ops} copy-outs moved next to the compute that reads them"
    if dropped:
        note += f"; {dropped} waits that would point back in the replay's order dropped"
    notes = [note]
    return plan.prev, plan.key, notes


def topological_keys(plan: StreamPlan, inp: ReplayInputs) -> int:
    """Order keys that keep the replay's one pass topological on the moved graph: each activity after its
    stream predecessor, the sources of its waits, every member of a collective it follows, and the sync that
    opens its host segment (Kahn's order, the measured keys as priority). Waits left in a cycle are dropped."""
    sg, key0 = plan.sg, plan.key
    n = sg.n
    preds: list[list[int]] = [[] for _ in range(n)]
    for arr in (plan.prev, inp.dep, inp.dep2):
        has = np.flatnonzero(arr >= 0)
        for t, src in zip(has.tolist(), arr[has].tolist(), strict=True):
            if sg.coll[src] >= 0:  # a member's end is known when its whole collective has arrived
                c = int(sg.coll[src])
                preds[t].extend(sg.coll_nodes[sg.coll_ptr[c]:sg.coll_ptr[c + 1]].tolist())
            else:
                preds[t].append(src)
    floor = key0.copy()
    if len(sg.seg_opened_by) and len(sg.sync_end):
        opener = np.where(sg.seg >= 0, sg.seg_opened_by[np.maximum(sg.seg, 0)], -1)
        floor = np.where(opener >= 0, sg.sync_end[np.maximum(opener, 0)] + 1, key0)
    succ: list[list[int]] = [[] for _ in range(n)]
    left = np.zeros(n, dtype=np.int64)
    for t, ps in enumerate(preds):
        ps[:] = sorted(set(ps) - {t})
        left[t] = len(ps)
        for q in ps:
            succ[q].append(t)
    key = np.maximum(key0, floor).tolist()
    k0 = key0.tolist()
    heap = [(k0[i], i) for i in np.flatnonzero(left == 0).tolist()]
    heapq.heapify(heap)
    done = np.zeros(n, dtype=bool)
    while heap:
        _, i = heapq.heappop(heap)
        done[i] = True
        for t in succ[i]:
            key[t] = max(key[t], key[i] + 1)
            left[t] -= 1
            if left[t] == 0:
                heapq.heappush(heap, (k0[t], t))
    plan.key[:] = key
    dropped = 0
    if not done.all():  # a cycle: the waits into what was never reached go
        for arr in (inp.dep, inp.dep2):
            bad = np.flatnonzero((arr >= 0) & ~done)
            bad = bad[plan.key[arr[bad]] >= plan.key[bad]]
            arr[bad] = -1
            dropped += len(bad)
    return dropped
