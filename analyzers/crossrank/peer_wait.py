"""Peer wait: each collective kernel split into waiting for the last peer and transfer."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from analyzers.crossrank.matching import _Matching
from analyzers.crossrank.report import CrossRankParams
from analyzers.timeline import intervals as iv
from analyzers.timeline.model import TraceSet

# --------------------------------------------------------------------------- peer wait

def peer_wait(m: _Matching, ranks: list[int], offsets: dict[int, int], params: CrossRankParams,
              world_size: int | None) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Arrival, late rank, and per rank wait / transfer split of every matched collective."""
    notes: list[str] = []
    mem = m.members.copy()
    if mem.empty:
        return m.colls.assign(arrival_ns=[], first_start_ns=[], skew_ns=[], late_rank=[], end_spread_ns=[],
                              max_wait_ns=[], total_wait_ns=[], peers_known=[]), mem, notes
    off = mem["rank"].map(offsets).to_numpy(dtype=np.int64)
    mem["start"] = mem["start"].to_numpy(dtype=np.int64) + off
    mem["end"] = mem["end"].to_numpy(dtype=np.int64) + off
    rx = re.compile(params.p2p_pattern)
    p2p_names = {n: bool(rx.search(str(n))) for n in m.colls["coll_name"].unique()}
    colls = m.colls.copy()
    pair_world = (colls["n_ranks"] == 2) & (world_size is None or world_size == 2)
    colls["peers_known"] = ~(colls["coll_name"].map(p2p_names).to_numpy(dtype=bool) & ~pair_world.to_numpy())
    if not colls["peers_known"].all():
        notes.append(f"{int((~colls['peers_known']).sum())} send/recv kernels matched, but the world has more than "
                     "the two ranks: their peers are unknown, so no wait is computed for them")
    if world_size is not None and world_size > len(ranks):
        notes.append(f"{len(ranks)} of {world_size} ranks given: arrival is the last start among the given ranks")
    g = mem.groupby("coll_id")
    arrival = g["start"].transform("max").to_numpy()
    known = mem["coll_id"].map(colls.set_index("coll_id")["peers_known"]).to_numpy(dtype=bool)
    dur = (mem["end"] - mem["start"]).to_numpy()
    wait = np.clip(arrival - mem["start"].to_numpy(), 0, dur)
    wait = np.where(known, wait, 0)
    mem["wait_ns"] = wait
    mem["transfer_ns"] = dur - wait
    mem["arrival"] = arrival
    late_idx = g["start"].idxmax()
    by_id = pd.DataFrame({
        "arrival_ns": g["start"].max(), "first_start_ns": g["start"].min(),
        "late_rank": mem.loc[late_idx.to_numpy(), "rank"].to_numpy(),
        "end_spread_ns": g["end"].max() - g["end"].min(),
        "max_wait_ns": g["wait_ns"].max(), "total_wait_ns": g["wait_ns"].sum(),
    })
    by_id["skew_ns"] = by_id["arrival_ns"] - by_id["first_start_ns"]
    by_id.loc[by_id["skew_ns"] < params.min_skew_ns, "late_rank"] = -1
    colls = colls.merge(by_id, left_on="coll_id", right_index=True, how="left")
    colls.loc[~colls["peers_known"], "late_rank"] = -1
    # Wide per-rank columns as nullable Int64 (a rank may be absent): exact epoch nanoseconds.
    names = {"start": "start_ns", "end": "end_ns", "wait_ns": "wait_ns", "transfer_ns": "transfer_ns"}
    for r in ranks:  # over ranks, not events
        sub = mem[mem["rank"] == r].drop_duplicates("coll_id").set_index("coll_id")[list(names)]
        sub = sub.rename(columns={c: f"{n}_r{r}" for c, n in names.items()}).astype("Int64")
        colls = colls.merge(sub, left_on="coll_id", right_index=True, how="left")
    cols = ["coll_id", "group", "index", "seq", "coll_name", "n_ranks", "peers_known", "arrival_ns",
            "first_start_ns", "skew_ns", "late_rank", "end_spread_ns", "max_wait_ns", "total_wait_ns"]
    colls = colls[cols + [c for c in colls.columns if c not in cols]].sort_values("coll_id").reset_index(drop=True)
    members = mem.rename(columns={"start": "start_ns", "end": "end_ns"})
    return colls, members, notes


def peer_wait_totals(traces: TraceSet, colls: pd.DataFrame, members: pd.DataFrame, offsets: dict[int, int],
                     params: CrossRankParams) -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]]]:
    """Per rank wait / transfer totals and effective overlap; per late rank the wait it caused."""
    out: dict[int, dict[str, Any]] = {}
    known_ids = set(colls.loc[colls["peers_known"], "coll_id"].tolist()) if len(colls) else set()
    mem = members[members["coll_id"].isin(known_ids)] if len(members) else members
    late = colls.set_index("coll_id")["late_rank"] if len(colls) else pd.Series(dtype=np.int64)
    for r in traces.rank_ids():
        t = traces.ranks[r]
        g = t.gpu
        comp = g["category"].to_numpy() == "compute"
        busy_c = iv.union(g["start_ns"].to_numpy()[comp], g["end_ns"].to_numpy()[comp])
        mr = mem[mem["rank"] == r] if len(mem) else mem
        off = int(offsets.get(r, 0))
        if len(mr):
            s_own = mr["start_ns"].to_numpy(dtype=np.int64) - off
            e_own = mr["end_ns"].to_numpy(dtype=np.int64) - off
            a_own = np.minimum(np.maximum(mr["arrival"].to_numpy(dtype=np.int64) - off, s_own), e_own)
            comm_u = iv.union(s_own, e_own)
            tr_u = iv.union(a_own, e_own)
            comm_ns, transfer_u_ns = iv.length(comm_u), iv.length(tr_u)
            ov = iv.length(iv.intersection(comm_u, busy_c))
            ov_tr = iv.length(iv.intersection(tr_u, busy_c))
            wait_ns, transfer_ns = int(mr["wait_ns"].sum()), int(mr["transfer_ns"].sum())
            late_of = mr["coll_id"].map(late).to_numpy()
            waiting = (late_of >= 0) & (late_of != r)
            by_late = pd.Series(mr["wait_ns"].to_numpy()[waiting]).groupby(late_of[waiting]).sum()
            exposed_by_late = {
                int(lr): iv.length(iv.difference(iv.union(s_own[waiting & (late_of == lr)],
                                                          e_own[waiting & (late_of == lr)]), busy_c))
                for lr in np.unique(late_of[waiting])}
        else:
            comm_ns = transfer_u_ns = ov = ov_tr = wait_ns = transfer_ns = 0
            by_late = pd.Series(dtype=np.int64)
            exposed_by_late = {}
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
            "n_late": int((late == r).sum()) if len(late) else 0,
            "wait_for_rank_ns": {str(int(k)): int(v) for k, v in by_late.items()},
            # Of the collectives that waited for that rank, the time no compute on this rank ran beside
            # (wait, or transfer the wait pushed out): the most the straggler can have cost here.
            "exposed_for_rank_ns": {str(k): int(v) for k, v in exposed_by_late.items()},
        }
    late_rows = []
    if len(colls):
        sig = colls[colls["late_rank"] >= 0]
        for lr, grp in sig.groupby("late_rank"):
            caused = int(grp["total_wait_ns"].sum())
            late_rows.append({
                "rank": int(lr), "n_collectives_last": int(len(grp)),
                "share_of_late_collectives": len(grp) / len(sig), "wait_caused_ns": caused,
                "worst_coll_id": int(grp.loc[grp["total_wait_ns"].idxmax(), "coll_id"]),
                "worst_wait_ns": int(grp["total_wait_ns"].max()),
            })
    late_rows.sort(key=lambda d: -d["wait_caused_ns"])
    return out, late_rows
