"""The whole set's graph: every rank's graph on one aligned timeline, plus collectives' joins.

A matched collective (analyzers.crossrank, peers known) is a join across ranks: each rank's
kernel starts when its own stream lets it (its arrival), the transfer starts when the last rank
has arrived, and each rank's kernel ends its own measured transfer later. Peer-to-peer copies are
matched across ranks too, but are one-sided (the copy engine moves the data, the peer waits for
nothing): they join no one, and run their own measured duration. Global node ids are
the ranks' GPU rows one rank after the other (``base[r] + row``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analyzers.crossrank.collective_table import comm_op
from analyzers.graph.rank_graph import PackedGraph, RankGraph, narrowed, unpacked
from analyzers.graph.scan import grouped_cummax


@dataclass
class SetGraph:
    """Global arrays over all ranks' GPU rows, segments and syncs (times aligned)."""

    ranks: list[int]
    graphs: dict[int, RankGraph]
    base: dict[int, int]  # first global node of each rank
    rank_of: np.ndarray  # int64 (fixes multiply it); the other node and sync indices are int32 where they fit
    start: np.ndarray
    end: np.ndarray
    cat: np.ndarray
    prev: np.ndarray
    seg: np.ndarray
    off: np.ndarray
    dep: np.ndarray
    dep_lat: np.ndarray
    step: np.ndarray
    latency: np.ndarray  # per node: its rank's launch latency
    turnaround: np.ndarray
    seg_base: np.ndarray
    seg_opened_by: np.ndarray
    sync_seg: np.ndarray
    sync_off: np.ndarray
    sync_awaited: np.ndarray
    sync_lat: np.ndarray
    sync_dur: np.ndarray
    sync_end: np.ndarray
    sync_opens: np.ndarray  # the segment each sync opens
    sync_after: np.ndarray  # (n, 2) global (sync, node)
    coll: np.ndarray  # per node: collective index, -1
    coll_ptr: np.ndarray  # CSR over collectives: members coll_nodes[coll_ptr[c]:coll_ptr[c+1]]
    coll_nodes: np.ndarray
    transfer: np.ndarray  # per node: measured transfer (collective members), else its duration
    order_key: np.ndarray  # per node: the topological ordering key (aligned start, after its joins)
    notes: list[str] = field(default_factory=list)
    stream_order: np.ndarray | None = None  # every node by rank, stream, start: each stream's prev chain in a row

    @property
    def n(self) -> int:
        return len(self.start)

    def node_label(self, i: int) -> str:
        """Node i's activity name. The critical path asks for it at every node it walks: one list of every
        node's name (references to each rank's names), made on the first call."""
        labels = self.__dict__.get("_labels")
        if labels is None:
            labels = self._labels = [self.graphs[r].names[j] for r in self.ranks
                                     for j in self.graphs[r].name_id.tolist()]
        return labels[i]


def _one_sided(g: RankGraph) -> np.ndarray:
    """Per row of g: a peer-to-peer copy. The copy engine reads or writes the peer's memory while the peer does
    nothing, so the copy waits for no other rank: the i-th copies of the ranks are not a join (on more than
    two ranks they copy to different peers, and one rank's copy often ends before another's starts). What
    orders copies across ranks is the symmetric-memory barriers around them, which stay joins."""
    named = np.asarray([comm_op(str(nm)) == "PeerCopy" for nm in g.names], dtype=bool)
    return named[g.name_id] if len(named) else np.zeros(g.n, dtype=bool)


def _shift(a: np.ndarray, by: int) -> np.ndarray:
    return np.where(a >= 0, a.astype(np.int64) + by, -1)


# The set's arrays over nodes, host segments and syncs, filled rank by rank: name -> (RankGraph field, size
# key, shifted by the rank's first node / segment / sync, or offset by its clock)
_NODE = {"start": ("start", "t"), "end": ("end", "t"), "prev": ("prev", "node"), "seg": ("seg", "seg"),
         "off": ("off", ""), "dep": ("dep", "node"), "dep_lat": ("dep_lat", ""), "step": ("step", "")}
_SEG = {"seg_base": ("seg_base", "t"), "seg_opened_by": ("seg_opened_by", "sync")}
_SYNC = {"sync_seg": ("sync_seg", "seg"), "sync_off": ("sync_off", ""), "sync_awaited": ("sync_awaited", "node"),
         "sync_lat": ("sync_lat", ""), "sync_dur": ("sync_dur", ""), "sync_end": ("sync_end", "t")}


class _StreamOrder:
    """Every activity by stream, then start (one sort, shared by the rounds of _ordered)."""

    def __init__(self, stream_key: np.ndarray, start: np.ndarray) -> None:
        self.o = np.lexsort((start, stream_key))
        sk = stream_key[self.o]
        self.first = np.r_[True, sk[1:] != sk[:-1]] if len(sk) else np.zeros(0, dtype=bool)
        pos = np.arange(len(sk))
        self.idx = pos - np.maximum.accumulate(np.where(self.first, pos, 0)) if len(sk) else pos

    def raised(self, key: np.ndarray) -> np.ndarray:
        """Each activity's key at least its stream predecessor's + 1 (a grouped running max)."""
        o, idx = self.o, self.idx
        ko = key[o]
        out = key.copy()
        out[o] = np.maximum(ko, grouped_cummax(ko - idx, self.first) + idx)
        return out


def _ordered(key: np.ndarray, streams: _StreamOrder, dep: np.ndarray) -> np.ndarray:
    """Keys raised so that the measured order stays topological once joins have moved some: after the
    stream predecessor, after the event-wait source (two rounds; what is left is counted by the replay)."""
    d = np.flatnonzero(dep >= 0)
    for _ in range(2):
        key = streams.raised(key)
        key[d] = np.maximum(key[d], key[dep[d]] + 1)
    return streams.raised(key)


def build_set_graph(graphs: Mapping[int, RankGraph | PackedGraph], offsets: dict[int, int],
                    members: pd.DataFrame | None, colls: pd.DataFrame | None) -> SetGraph:
    """Join the ranks' graphs; members/colls: the cross-rank report's matched collectives (or None).

    Each rank's arrays are copied into the set's, one rank unpacked at a time (a PackedGraph); the set graph
    keeps each rank's slim() graph, not a second copy of what it holds (the graphs given are left as they are)."""
    ranks = sorted(graphs)
    base, sbase, ybase = {}, {}, {}
    n = ns = ny = 0
    for r in ranks:
        base[r], sbase[r], ybase[r] = n, ns, ny
        g = graphs[r]
        n, ns, ny = n + g.n, ns + (g.n_seg if isinstance(g, PackedGraph) else len(g.seg_base)), \
            ny + (g.n_sync if isinstance(g, PackedGraph) else len(g.sync_seg))
    c = {k: np.empty(size, dtype=np.int64) for names, size in ((_NODE, n), (_SEG, ns), (_SYNC, ny)) for k in names}
    c.update(rank=np.empty(n, dtype=np.int64), cat=np.empty(n, dtype=np.int8), lat=np.empty(n, dtype=np.int64),
             turn=np.empty(n, dtype=np.int64), one_sided=np.empty(n, dtype=bool),
             stream_key=np.empty(n, dtype=np.int64))
    safter = np.empty((0, 2), dtype=np.int64)
    slim: dict[int, RankGraph] = {}
    notes: list[str] = []
    afters = []
    for i, r in enumerate(ranks):
        g, o = unpacked(graphs[r]), int(offsets.get(r, 0))
        shifts = {"t": o, "node": base[r], "seg": sbase[r], "sync": ybase[r]}
        for names, at, size in ((_NODE, base[r], g.n), (_SEG, sbase[r], len(g.seg_base)),
                                (_SYNC, ybase[r], len(g.sync_seg))):
            for k, (field_name, how) in names.items():
                a = getattr(g, field_name)
                c[k][at:at + size] = (a + o if how == "t" else _shift(a, shifts[how]) if how else a)
        rows = slice(base[r], base[r] + g.n)
        c["rank"][rows], c["cat"][rows] = r, g.cat
        c["lat"][rows], c["turn"][rows] = g.launch_latency_ns, g.turnaround_ns
        c["one_sided"][rows] = _one_sided(g)
        c["stream_key"][rows] = i * (1 << 32) + g.stream.astype(np.int64)
        afters.append(g.sync_after.astype(np.int64) + np.array([ybase[r], base[r]], dtype=np.int64))
        slim[r] = g.slim(c["start"][rows], c["end"][rows], c["cat"][rows])
        notes += g.notes
        del g
    if afters:
        safter = np.concatenate(afters)
    opened = c["seg_opened_by"]
    sync_opens = np.full(ny, -1, dtype=np.int64)
    segs = np.flatnonzero(opened >= 0)
    sync_opens[opened[segs]] = segs
    start, end = c["start"], c["end"]
    coll = np.full(n, -1, dtype=np.int64)
    transfer = end - start
    ptr, nodes = np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    key = start.copy()
    streams = _StreamOrder(c.pop("stream_key"), start)
    if members is not None and len(members) and colls is not None and len(colls):
        known = colls.loc[colls["peers_known"].astype(bool), "coll_id"].to_numpy()
        m = members[members["coll_id"].isin(known) & members["rank"].isin(ranks)]
        m = m.sort_values(["coll_id", "rank"], kind="stable")
        gid = np.asarray([base[int(r)] for r in m["rank"].to_numpy()], dtype=np.int64) + m["row"].to_numpy(np.int64)
        cid = m["coll_id"].to_numpy(np.int64)
        joins = ~c["one_sided"][gid]  # a peer copy waits for no other rank: no join
        gid, cid = gid[joins], cid[joins]
        heads = np.flatnonzero(np.r_[True, cid[1:] != cid[:-1]]) if len(cid) else np.zeros(0, dtype=np.int64)
        sizes = np.diff(np.r_[heads, len(cid)])
        multi = np.repeat(sizes > 1, sizes)  # a join needs two ranks or more
        gid, cid = gid[multi], cid[multi]
        heads = np.flatnonzero(np.r_[True, cid[1:] != cid[:-1]]) if len(cid) else np.zeros(0, dtype=np.int64)
        ptr = np.r_[heads, len(cid)].astype(np.int64)
        nodes = gid
        coll[gid] = np.repeat(np.arange(len(heads)), np.diff(ptr))
        arrival = np.maximum.reduceat(start[gid], heads) if len(heads) else np.zeros(0, dtype=np.int64)
        # the measured transfer: from the last arrival to the kernel's end (0 where clocks disagree)
        transfer[gid] = np.clip(end[gid] - np.repeat(arrival, np.diff(ptr)), 0, None)
        # successors of a member come after its join in the replay's order
        after = np.repeat(arrival, np.diff(ptr)) + 1
        nxt = np.full(n, -1, dtype=np.int64)
        has_prev = np.flatnonzero(c["prev"] >= 0)
        nxt[c["prev"][has_prev]] = has_prev
        for succ in (nxt[gid], ):
            ok = succ >= 0
            key[succ[ok]] = np.maximum(key[succ[ok]], after[ok])
        has_dep = np.flatnonzero((c["dep"] >= 0) & (coll[np.maximum(c["dep"], 0)] >= 0))
        if len(has_dep):
            d = c["dep"][has_dep]
            a = arrival[coll[d]] + 1
            key[has_dep] = np.maximum(key[has_dep], a)
        key = _ordered(key, streams, c["dep"])
    narrow = {k: narrowed(c[k]) for k in ("prev", "seg", "dep", "sync_seg", "sync_awaited")}  # indices: int32
    return SetGraph(
        ranks=ranks, graphs=slim, base=base, rank_of=c["rank"], start=start, end=end, cat=c["cat"],
        off=c["off"], dep_lat=c["dep_lat"], step=c["step"], latency=c["lat"], turnaround=c["turn"],
        seg_base=c["seg_base"], seg_opened_by=narrowed(opened), sync_off=c["sync_off"], sync_lat=c["sync_lat"],
        sync_dur=c["sync_dur"], sync_end=c["sync_end"], sync_opens=narrowed(sync_opens), sync_after=narrowed(safter),
        coll=narrowed(coll), coll_ptr=ptr, coll_nodes=narrowed(nodes), transfer=transfer, order_key=key, notes=notes,
        stream_order=narrowed(streams.o), **narrow)


def rank_graphs_of(traces, syncs: dict[int, pd.DataFrame], step_pattern: str,
                   pre: dict[int, RankGraph | None] | None = None) -> dict[int, RankGraph]:
    """Each rank's graph: the one made beside the parse, else built here (needs the host tables)."""
    from analyzers.graph.rank_graph import build_rank_graph

    pre = pre or {}
    return {r: pre.get(r) or build_rank_graph(traces.ranks[r], syncs[r], step_pattern) for r in traces.rank_ids()}
