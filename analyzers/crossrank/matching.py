"""Collective matching: which kernels of different ranks are the same collective (by group and position)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analyzers.crossrank.frames import _Frames, _normalized
from analyzers.crossrank.report import CrossRankParams
from analyzers.timeline.model import TraceSet

# --------------------------------------------------------------------------- collective matching

@dataclass
class _Matching:
    members: pd.DataFrame  # coll_id, rank, row, start, end, stream, role, label, group, key, seq
    colls: pd.DataFrame  # coll_id, group, index, seq, coll_name, n_ranks
    unmatched: list[dict[str, Any]]
    inconsistent: list[dict[str, Any]]
    notes: list[str]


def match_collectives(traces: TraceSet, frames: _Frames, role_labels: dict[int, str],
                      params: CrossRankParams, expected_offsets: dict[int, int] | None = None) -> _Matching:
    """The n-th collective of a group on each rank is the same collective (seq when known).

    A group whose ranks ran different numbers of collectives (no seq) is inconsistent, unless
    expected_offsets (a trusted clock) are given and trimming a few collectives at the trace
    edges makes every rank's ends coincide with the reference's (see _trim_at_edges).
    """
    parts = []
    for r in frames.ranks:
        df = frames.by_rank[r]
        c = df[df["comm"].to_numpy()]
        if c.empty:
            continue
        meta = traces.ranks[r].gpu.iloc[c["row"].to_numpy()]
        norm = _normalized(frames.names[c["gname"].to_numpy()])
        coll = meta["coll_name"].to_numpy(dtype=object).astype(str)
        pg = meta["pg"].to_numpy(dtype=object).astype(str)
        role_txt = pd.Series(c["role"].to_numpy()).map(role_labels).fillna("").to_numpy(dtype=object)
        role_txt = np.where(role_txt == "", "unpaired stream " + c["stream"].astype(str).to_numpy(), role_txt)
        group = np.where(pg != "", "pg " + pg.astype(object),
                         np.where(coll != "", "nccl", norm + " @ " + role_txt.astype(object)))
        parts.append(pd.DataFrame({
            "rank": r, "row": c["row"].to_numpy(), "start": c["start"].to_numpy(), "end": c["end"].to_numpy(),
            "stream": c["stream"].to_numpy(), "role": c["role"].to_numpy(),
            "label": np.where(coll != "", coll, norm), "group": group, "seq": meta["seq"].to_numpy(dtype=np.int64),
        }))
    empty_members = pd.DataFrame(columns=["coll_id", "rank", "row", "start", "end", "stream", "role", "label",
                                          "group", "key", "occ", "seq"])
    empty_colls = pd.DataFrame(columns=["coll_id", "group", "index", "seq", "coll_name", "n_ranks"])
    if not parts:
        return _Matching(empty_members, empty_colls, [], [], ["no communication activity on any rank"])
    allc = pd.concat(parts, ignore_index=True).sort_values(["rank", "group", "start"], kind="stable")
    notes: list[str] = []
    unmatched: list[dict[str, Any]] = []
    inconsistent: list[dict[str, Any]] = []

    # seq is used for a group when every row of it, on every rank, carries one.
    seq_ok = allc.groupby("group")["seq"].min() >= 0
    allc["use_seq"] = allc["group"].map(seq_ok).to_numpy(dtype=bool)
    pos = allc.groupby(["rank", "group"]).cumcount().to_numpy()
    allc["key"] = np.where(allc["use_seq"], allc["seq"], pos)
    allc["occ"] = allc.groupby(["rank", "group", "key"]).cumcount().to_numpy()

    counts = allc.groupby(["group", "rank"]).size().unstack(fill_value=0)
    members_per_group = (counts > 0).sum(axis=1)
    lonely = members_per_group[members_per_group < 2].index
    for g in lonely:
        who = counts.columns[counts.loc[g] > 0].tolist()
        unmatched.append({"group": g, "rank": int(who[0]), "count": int(counts.loc[g, who[0]]),
                          "reason": "only this rank runs this communication"})
    order_groups = counts.index[~counts.index.isin(lonely) & ~seq_ok.reindex(counts.index).to_numpy()]
    trimmed: set[str] = set()
    for g in order_groups:  # over groups, not events
        row = counts.loc[g]
        present = row[row > 0]
        if present.nunique() <= 1:
            continue
        shifts = _trim_at_edges(allc[allc["group"] == g], expected_offsets, params) if expected_offsets else None
        if shifts is not None:
            sel = (allc["group"] == g).to_numpy()
            allc.loc[sel, "key"] = allc.loc[sel, "key"].to_numpy() - allc.loc[sel, "rank"].map(shifts).to_numpy()
            trimmed.add(g)
            continue
        inconsistent.append({"group": g, "count": int(present.sum()),
                             "reason": "ranks ran different numbers of these collectives and the trace has "
                                       "no sequence numbers: matching by order would guess",
                             "counts": {str(k): int(v) for k, v in present.items()}})
    bad_groups = set(lonely) | {d["group"] for d in inconsistent}
    allc = allc[~allc["group"].isin(bad_groups)]

    # Matched = a (group, key, occ) present on every rank that runs the group.
    n_need = allc["group"].map(members_per_group)
    have = allc.groupby(["group", "key", "occ"])["rank"].transform("nunique")
    partial = allc[have.to_numpy() < n_need.to_numpy()]
    if not partial.empty:
        agg = partial.groupby(["group", "rank"]).size()
        for (g, r), n in agg.items():
            why = ("at a trace edge: the other ranks' profiles do not cover it (edges found where the "
                   "collective ends coincide)") if g in trimmed else \
                "sequence numbers not seen on every rank of the group"
            unmatched.append({"group": g, "rank": int(r), "count": int(n), "reason": why})
    allc = allc[have.to_numpy() == n_need.to_numpy()]

    # Inconsistent = matched rows whose collective names differ across ranks.
    n_labels = allc.groupby(["group", "key", "occ"])["label"].transform("nunique")
    diff = allc[n_labels.to_numpy() > 1]
    if not diff.empty:
        wide = diff.pivot_table(index=["group", "key", "occ"], columns="rank", values="label", aggfunc="first")
        for (g, k, _o), row in wide.iterrows():  # only the inconsistent collectives, reported one by one
            inconsistent.append({"group": g, "index": int(k), "count": 1,
                                 "reason": "matched kernels are different collectives",
                                 "names": {str(c): str(v) for c, v in row.dropna().items()}})
    allc = allc[n_labels.to_numpy() == 1].copy()
    if allc.empty:
        return _Matching(empty_members, empty_colls, unmatched, inconsistent, notes)

    first = allc.groupby(["group", "key", "occ"])["start"].transform("min")
    allc["first"] = first.to_numpy()
    ids = allc.groupby(["group", "key", "occ"], sort=False).ngroup()
    # Number collectives by their earliest start, so ids read in time order.
    order = allc.assign(_id=ids.to_numpy()).groupby("_id")["first"].min().sort_values(kind="stable")
    remap = pd.Series(np.arange(len(order)), index=order.index)
    allc["coll_id"] = remap.reindex(ids.to_numpy()).to_numpy()
    members = allc[["coll_id", "rank", "row", "start", "end", "stream", "role", "label", "group", "key", "occ",
                    "seq"]].sort_values(["coll_id", "rank"]).reset_index(drop=True)
    colls = members.groupby("coll_id").agg(
        group=("group", "first"), index=("key", "first"), seq=("seq", "max"), coll_name=("label", "first"),
        n_ranks=("rank", "nunique")).reset_index()
    if unmatched or inconsistent:
        notes.append("some communication could not be matched across ranks (see unmatched / inconsistent); "
                     "it is left out of peer wait")
    return _Matching(members, colls, unmatched, inconsistent, notes)


def _trim_at_edges(g: pd.DataFrame, offsets: dict[int, int], params: CrossRankParams) -> dict[int, int] | None:
    """Per rank the index shift that pairs its collectives of this group with the reference's.

    Profilers start and stop at slightly different times on each rank, so one rank may hold a
    collective or two more at either end. On a trusted clock, the right shift is the one where
    the ends coincide: median |aligned end_ref[i] - aligned end_r[i + s]| <= tolerance, for
    |s| <= max_edge_trim, and no other shift comes close (a period shorter than the tolerance
    would make it ambiguous). None when any rank cannot be placed that way.
    """
    ranks = sorted(g["rank"].unique().tolist())
    ref = ranks[0]
    tol, cap = params.shared_clock_tolerance_ns, params.max_edge_trim
    e_ref = g.loc[g["rank"] == ref, "end"].to_numpy(dtype=np.int64) + offsets.get(ref, 0)
    shifts = {ref: 0}
    for r in ranks[1:]:  # over ranks
        e_r = g.loc[g["rank"] == r, "end"].to_numpy(dtype=np.int64) + offsets.get(r, 0)
        if abs(len(e_r) - len(e_ref)) > 2 * cap:
            return None
        scores = []
        for sh in range(-cap, cap + 1):  # a handful of candidate shifts
            i0, i1 = max(0, -sh), min(len(e_ref), len(e_r) - sh)
            if i1 - i0 < max(1, min(len(e_ref), len(e_r)) - cap):
                continue
            d = np.abs(e_ref[i0:i1] - e_r[i0 + sh:i1 + sh])
            scores.append((float(np.median(d)), sh))
        scores.sort()
        if not scores or scores[0][0] > tol or (len(scores) > 1 and scores[1][0] <= tol):
            return None
        shifts[r] = scores[0][1]
    return shifts
