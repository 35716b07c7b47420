"""Peer wait: each collective kernel split into waiting for the last peer and transfer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analyzers.crossrank.frames import _search, _slices
from analyzers.crossrank.matching import _Matching
from analyzers.crossrank.report import CrossRankParams
from analyzers.timeline import intervals as iv
from analyzers.timeline.model import TraceSet

# --------------------------------------------------------------------------- peer wait

def peer_wait(m: _Matching, ranks: list[int], offsets: dict[int, int], params: CrossRankParams,
              world_size: int | None) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray, list[str]]:
    """Arrival, late rank, and per rank wait / transfer split of every matched collective; also each member's
    collective's arrival (aligned), which peer_wait_totals reads and the report does not keep."""
    notes: list[str] = []
    mem = m.members
    if mem.empty:
        return m.colls.assign(arrival_ns=[], first_start_ns=[], skew_ns=[], late_rank=[], end_spread_ns=[],
                              max_wait_ns=[], total_wait_ns=[], peers_known=[]), mem.copy(), \
            np.zeros(0, dtype=np.int64), notes
    off = _per_member(offsets, mem["rank"].to_numpy())
    start = mem["start"].to_numpy(dtype=np.int64) + off
    end = mem["end"].to_numpy(dtype=np.int64) + off
    del off
    colls = m.colls.copy()
    pair_world = (colls["n_ranks"] == 2) & (world_size is None or world_size == 2)
    colls["peers_known"] = ~(_search(colls["coll_name"], params.p2p_pattern) & ~pair_world.to_numpy())
    if not colls["peers_known"].all():
        notes.append(f"{int((~colls['peers_known']).sum())} send/recv kernels matched, but the world has more than "
                     "the two ranks: their peers are unknown, so no wait is computed for them")
    if world_size is not None and world_size > len(ranks):
        notes.append(f"{len(ranks)} of {world_size} ranks given: arrival is the last start among the given ranks")
    # members are sorted by (coll_id, rank): each collective is one run of rows.
    cid = mem["coll_id"].to_numpy(dtype=np.int64)
    heads = np.flatnonzero(np.r_[True, cid[1:] != cid[:-1]])
    size = np.diff(np.r_[heads, len(cid)])
    arrival_c = np.maximum.reduceat(start, heads)
    arrival = np.repeat(arrival_c, size)
    known = colls["peers_known"].to_numpy(dtype=bool)[np.searchsorted(colls["coll_id"].to_numpy(), cid)]
    dur = end - start
    wait = np.where(known, np.clip(arrival - start, 0, dur), 0)
    transfer = dur - wait
    del dur, known
    pos = np.arange(len(cid))
    late_pos = np.minimum.reduceat(np.where(start == arrival, pos, len(cid)), heads)  # first latest start
    del pos
    first_c = np.minimum.reduceat(start, heads)
    skew = arrival_c - first_c
    late_rank = np.where(skew < params.min_skew_ns, -1, mem["rank"].to_numpy()[late_pos]).astype(np.int64)
    # colls rows are in coll_id order, one per run of members: the per-collective values line up.
    data = {c: colls[c].array for c in colls.columns}
    data.update({
        "arrival_ns": arrival_c, "first_start_ns": first_c, "skew_ns": skew,
        "late_rank": np.where(colls["peers_known"].to_numpy(dtype=bool), late_rank, -1),
        "end_spread_ns": np.maximum.reduceat(end, heads) - np.minimum.reduceat(end, heads),
        "max_wait_ns": np.maximum.reduceat(wait, heads), "total_wait_ns": np.add.reduceat(wait, heads),
    })
    cols = ["coll_id", "group", "index", "seq", "coll_name", "n_ranks", "peers_known", "arrival_ns",
            "first_start_ns", "skew_ns", "late_rank", "end_spread_ns", "max_wait_ns", "total_wait_ns"]
    colls = pd.DataFrame({c: data[c] for c in cols}, copy=False)  # per-rank columns: report.collectives_by_rank
    # the members as matched, start and end aligned, with their wait and transfer (no copy of the matched columns)
    members = pd.DataFrame({**{c: mem[c].array for c in mem.columns}, "start": start, "end": end, "wait_ns": wait,
                            "transfer_ns": transfer}, copy=False).rename(columns={"start": "start_ns", "end": "end_ns"})
    return colls, members, arrival, notes


def _per_member(values: dict[int, int], rank: np.ndarray) -> np.ndarray:
    """values[rank] for each member row, as int64 (every rank has a value)."""
    keys = np.asarray(sorted(values), dtype=np.int64)
    vals = np.asarray([values[int(k)] for k in keys], dtype=np.int64)
    return vals[np.searchsorted(keys, rank)] if len(keys) else np.zeros(len(rank), dtype=np.int64)


def _covered_before(busy: iv.Intervals) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A merged interval set with the time it covers before each interval: what _covered needs."""
    s, e = busy
    before = np.r_[0, np.cumsum(e - s)[:-1]].astype(np.int64) if len(s) else np.zeros(0, dtype=np.int64)
    return s, e, before


def _covered(busy: tuple[np.ndarray, np.ndarray, np.ndarray], t: np.ndarray) -> np.ndarray:
    """Time of the merged set busy before each time t (a running total, read with one searchsorted)."""
    s, e, before = busy
    if not len(s):
        return np.zeros(len(t), dtype=np.int64)
    k = np.searchsorted(s, t, side="right") - 1
    kc = np.maximum(k, 0)
    return np.where(k >= 0, before[kc] + np.clip(t - s[kc], 0, e[kc] - s[kc]), 0)


def _overlap(u: iv.Intervals, busy: tuple[np.ndarray, np.ndarray, np.ndarray]) -> int:
    """Length of (merged set u) ∩ busy: = length(iv.intersection(u, busy)), without a sweep per call."""
    return int((_covered(busy, u[1]) - _covered(busy, u[0])).sum())


def peer_wait_totals(traces: TraceSet, colls: pd.DataFrame, members: pd.DataFrame, arrival: np.ndarray,
                     offsets: dict[int, int], params: CrossRankParams
                     ) -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]]]:
    """Per rank wait / transfer totals and effective overlap; per late rank the wait it caused (arrival: each
    member's collective's arrival, as peer_wait gives it)."""
    out: dict[int, dict[str, Any]] = {}
    late = colls["late_rank"].to_numpy(dtype=np.int64) if len(colls) else np.zeros(0, dtype=np.int64)
    n_late = dict(zip(*np.unique(late, return_counts=True), strict=True))
    by_rank: dict[int, np.ndarray] = {}
    if len(members) and len(colls):
        pos = np.searchsorted(colls["coll_id"].to_numpy(), members["coll_id"].to_numpy())
        rows = np.flatnonzero(colls["peers_known"].to_numpy(dtype=bool)[pos])
        rank = members["rank"].to_numpy()[rows]
        o = np.argsort(rank, kind="stable")
        rows_o = rows[o]  # once: a view per rank into one array (rows[o] per rank kept ranks x members alive)
        by_rank = {r: rows_o[sl] for r, sl in _slices(rank[o]).items()}
        m_start, m_end = members["start_ns"].to_numpy(dtype=np.int64), members["end_ns"].to_numpy(dtype=np.int64)
        m_arrival, m_late = arrival, late[pos]
        m_wait, m_transfer = members["wait_ns"].to_numpy(), members["transfer_ns"].to_numpy()
    for r in traces.rank_ids():
        t = traces.ranks[r]
        g = t.gpu
        comp = (g["category"] == "compute").to_numpy(dtype=bool)
        busy_c = iv.union(g["start_ns"].to_numpy()[comp], g["end_ns"].to_numpy()[comp])
        mr = by_rank.get(r)
        off = int(offsets.get(r, 0))
        if mr is not None and len(mr):
            busy = _covered_before(busy_c)
            s_own, e_own = m_start[mr] - off, m_end[mr] - off
            a_own = np.minimum(np.maximum(m_arrival[mr] - off, s_own), e_own)
            comm_u = iv.union(s_own, e_own)
            tr_u = iv.union(a_own, e_own)
            comm_ns, transfer_u_ns = iv.length(comm_u), iv.length(tr_u)
            ov, ov_tr = _overlap(comm_u, busy), _overlap(tr_u, busy)
            wait_ns, transfer_ns = int(m_wait[mr].sum()), int(m_transfer[mr].sum())
            late_of = m_late[mr]
            waiting = (late_of >= 0) & (late_of != r)
            late_ranks, which = np.unique(late_of[waiting], return_inverse=True)
            caused = np.zeros(len(late_ranks), dtype=np.int64)
            np.add.at(caused, which, m_wait[mr][waiting])
            by_late = dict(zip(late_ranks.tolist(), caused.tolist(), strict=True))
            exposed_by_late = {}
            for lr in late_ranks.tolist():  # over the ranks this one waited for
                u = iv.union(s_own[waiting & (late_of == lr)], e_own[waiting & (late_of == lr)])
                exposed_by_late[int(lr)] = iv.length(u) - _overlap(u, busy)
        else:
            comm_ns = transfer_u_ns = ov = ov_tr = wait_ns = transfer_ns = 0
            by_late, exposed_by_late, mr = {}, {}, ()
        kernel_ns = wait_ns + transfer_ns
        out[r] = {
            "n_collectives": int(len(mr)),
            "kernel_ns": kernel_ns,
            "wait_ns": wait_ns,
            "transfer_ns": transfer_ns,
            "wait_fraction": wait_ns / kernel_ns if kernel_ns else None,
            "comm_ns": comm_ns,
            "overlap_ratio": ov / comm_ns if comm_ns else None,
            "transfer_busy_ns": transfer_u_ns,
            "effective_overlap_ratio": ov_tr / transfer_u_ns if transfer_u_ns else None,
            "n_late": int(n_late.get(r, 0)),
            "wait_for_rank_ns": {str(int(k)): int(v) for k, v in by_late.items()},
            # Of the collectives that waited for that rank, the time no compute on this rank ran beside
            # (wait, or transfer the wait pushed out): the most the straggler can have cost here.
            "exposed_for_rank_ns": {str(k): int(v) for k, v in exposed_by_late.items()},
        }
    late_rows = []
    sig = np.flatnonzero(late >= 0)
    if len(sig):  # per late rank, in rank order: the collectives where it came last
        o = sig[np.argsort(late[sig], kind="stable")]
        total = colls["total_wait_ns"].to_numpy(dtype=np.int64)[o]
        ids = colls["coll_id"].to_numpy(dtype=np.int64)[o]
        for lr, sl in _slices(late[o]).items():
            worst = sl.start + int(np.argmax(total[sl]))  # the first of the largest, as idxmax
            late_rows.append({
                "rank": int(lr), "n_collectives_last": sl.stop - sl.start,
                "share_of_late_collectives": (sl.stop - sl.start) / len(sig),
                "wait_caused_ns": int(total[sl].sum()), "worst_coll_id": int(ids[worst]),
                "worst_wait_ns": int(total[worst]),
            })
    late_rows.sort(key=lambda d: -d["wait_caused_ns"])
    return out, late_rows
