"""The whole set's graph: every rank's graph on one aligned timeline, plus collectives' joins.

A matched collective (analyzers.crossrank, peers known) is a join across ranks: each rank's
kernel starts when its own stream lets it (its arrival), the transfer starts when the last rank
has arrived, and each rank's kernel ends its own measured transfer later. Peer-to-peer copies are
matched across ranks too, but are one-sided (the copy engine moves the data, the peer waits for
nothing): they join no one, and run their own measured duration. Global node ids are
the ranks' GPU rows one rank after the other (``base[r] + row``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analyzers.crossrank.collective_table import comm_op
from analyzers.graph.rank_graph import RankGraph
from analyzers.graph.scan import grouped_cummax


@dataclass
class SetGraph:
    """Global arrays over all ranks' GPU rows, segments and syncs (times aligned)."""

    ranks: list[int]
    graphs: dict[int, RankGraph]
    base: dict[int, int]  # first global node of each rank
    rank_of: np.ndarray
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


def _one_sided(graphs: dict[int, RankGraph], ranks: list[int]) -> np.ndarray:
    """Per node: a peer-to-peer copy. The copy engine reads or writes the peer's memory while the peer does
    nothing, so the copy waits for no other rank: the i-th copies of the ranks are not a join (on more than
    two ranks they copy to different peers, and one rank's copy often ends before another's starts). What
    orders copies across ranks is the symmetric-memory barriers around them, which stay joins."""
    parts = []
    for r in ranks:
        g = graphs[r]
        named = np.asarray([comm_op(str(nm)) == "PeerCopy" for nm in g.names], dtype=bool)
        parts.append(named[g.name_id] if len(named) else np.zeros(g.n, dtype=bool))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def _cat(parts: list[np.ndarray], dtype=np.int64) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)


def _shift(a: np.ndarray, by: int) -> np.ndarray:
    return np.where(a >= 0, a + by, -1)


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


def build_set_graph(graphs: dict[int, RankGraph], offsets: dict[int, int], members: pd.DataFrame | None,
                    colls: pd.DataFrame | None) -> SetGraph:
    """Join the ranks' graphs; members/colls: the cross-rank report's matched collectives (or None)."""
    ranks = sorted(graphs)
    base, sbase, ybase = {}, {}, {}
    n = ns = ny = 0
    for r in ranks:
        base[r], sbase[r], ybase[r] = n, ns, ny
        g = graphs[r]
        n, ns, ny = n + g.n, ns + len(g.seg_base), ny + len(g.sync_seg)
    parts: dict[str, list[np.ndarray]] = {k: [] for k in (
        "rank", "start", "end", "cat", "prev", "seg", "off", "dep", "dlat", "step", "lat", "turn", "seg_base", "opened",
        "sseg", "soff", "sawait", "slat", "sdur", "send", "safter")}
    for r in ranks:
        g, o = graphs[r], int(offsets.get(r, 0))
        b, sb, yb = base[r], sbase[r], ybase[r]
        parts["rank"].append(np.full(g.n, r))
        parts["start"].append(g.start + o)
        parts["end"].append(g.end + o)
        parts["cat"].append(g.cat)
        parts["prev"].append(_shift(g.prev, b))
        parts["seg"].append(_shift(g.seg, sb))
        parts["off"].append(g.off)
        parts["dep"].append(_shift(g.dep, b))
        parts["dlat"].append(g.dep_lat)
        parts["step"].append(g.step)
        parts["lat"].append(np.full(g.n, g.launch_latency_ns))
        parts["turn"].append(np.full(g.n, g.turnaround_ns))
        parts["seg_base"].append(g.seg_base + o)
        parts["opened"].append(_shift(g.seg_opened_by, yb))
        parts["sseg"].append(_shift(g.sync_seg, sb))
        parts["soff"].append(g.sync_off)
        parts["sawait"].append(_shift(g.sync_awaited, b))
        parts["slat"].append(g.sync_lat)
        parts["sdur"].append(g.sync_dur)
        parts["send"].append(g.sync_end + o)
        parts["safter"].append(g.sync_after + np.array([yb, b], dtype=np.int64))
    c = {k: _cat(v) for k, v in parts.items() if k != "safter"}
    opened = c["opened"]
    sync_opens = np.full(ny, -1, dtype=np.int64)
    segs = np.flatnonzero(opened >= 0)
    sync_opens[opened[segs]] = segs
    start, end = c["start"], c["end"]
    coll = np.full(n, -1, dtype=np.int64)
    transfer = end - start
    ptr, nodes = np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    notes: list[str] = []
    key = start.copy()
    stream_key = (np.repeat(np.arange(len(ranks), dtype=np.int64), [graphs[r].n for r in ranks]) * (1 << 32)
                  + _cat([graphs[r].stream for r in ranks]))
    streams = _StreamOrder(stream_key, start)
    if members is not None and len(members) and colls is not None and len(colls):
        known = colls.loc[colls["peers_known"].astype(bool), "coll_id"].to_numpy()
        m = members[members["coll_id"].isin(known) & members["rank"].isin(ranks)]
        m = m.sort_values(["coll_id", "rank"], kind="stable")
        gid = np.asarray([base[int(r)] for r in m["rank"].to_numpy()], dtype=np.int64) + m["row"].to_numpy(np.int64)
        cid = m["coll_id"].to_numpy(np.int64)
        joins = ~_one_sided(graphs, ranks)[gid]  # a peer copy waits for no other rank: no join
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
    safter = np.concatenate(parts["safter"]) if parts["safter"] else np.zeros((0, 2), dtype=np.int64)
    for r in ranks:
        notes += graphs[r].notes
    return SetGraph(
        ranks=ranks, graphs=graphs, base=base, rank_of=c["rank"], start=start, end=end, cat=c["cat"],
        prev=c["prev"], seg=c["seg"], off=c["off"], dep=c["dep"], dep_lat=c["dlat"], step=c["step"], latency=c["lat"],
        turnaround=c["turn"], seg_base=c["seg_base"], seg_opened_by=opened, sync_seg=c["sseg"],
        sync_off=c["soff"], sync_awaited=c["sawait"], sync_lat=c["slat"], sync_dur=c["sdur"], sync_end=c["send"],
        sync_opens=sync_opens, sync_after=safter, coll=coll, coll_ptr=ptr, coll_nodes=nodes, transfer=transfer,
        order_key=key, notes=notes, stream_order=streams.o)


def rank_graphs_of(traces, syncs: dict[int, pd.DataFrame], step_pattern: str,
                   pre: dict[int, RankGraph | None] | None = None) -> dict[int, RankGraph]:
    """Each rank's graph: the one made beside the parse, else built here (needs the host tables)."""
    from analyzers.graph.rank_graph import build_rank_graph

    pre = pre or {}
    return {r: pre.get(r) or build_rank_graph(traces.ranks[r], syncs[r], step_pattern) for r in traces.rank_ids()}
