"""Collective matching: which kernels of different ranks are the same collective (by group and position)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analyzers.crossrank.frames import _codes, _Frames, _normalized, _runs
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


_MEMBER_COLUMNS = ["coll_id", "rank", "row", "start", "end", "stream", "role", "label", "group", "key", "occ", "seq"]


@dataclass
class _CommRows:
    """Every rank's communication rows, sorted by (rank, group, start), and their string values.

    Group and label depend on (pg, coll_name, kernel name, role, stream) alone, so the strings are
    built once per distinct combination (combo) and the rows carry integer codes.
    """

    rows: dict[str, np.ndarray]  # rank, row, start, end, stream, role, gname, seq, combo, gcode, lab
    groups: np.ndarray  # gcode -> group (sorted, so code order is the groups' order)
    labels: np.ndarray  # combo -> label


def _strings(col: pd.Series, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes of col[idx] and the distinct values as str (as .astype(str) would write them)."""
    codes, uniq = pd.factorize(col.array.take(idx), use_na_sentinel=False)
    return codes, np.asarray(uniq, dtype=object).astype(str)


def _comm_rows(traces: TraceSet, frames: _Frames, role_labels: dict[int, str]) -> _CommRows | None:
    """Every rank's communication rows with their group and label, sorted by rank, group, start."""
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("rank", "row", "start", "end", "stream", "role",
                                                           "gname", "seq", "coll", "pg")}
    texts: dict[str, list[np.ndarray]] = {"coll": [], "pg": []}
    seen = {"coll": 0, "pg": 0}  # distinct values so far: local codes + this = codes into the concatenation
    for r in frames.ranks:
        rows = frames.by_rank[r]
        idx = np.flatnonzero(rows.comm)
        if idx.size == 0:
            continue
        gpu = traces.ranks[r].gpu
        for k, v in (("rank", np.full(idx.size, r, dtype=np.int64)), ("row", idx.astype(np.int64)),
                     ("start", rows.start[idx]), ("end", rows.end[idx]), ("stream", rows.stream[idx]),
                     ("role", rows.role[idx]), ("gname", rows.gname[idx]),
                     ("seq", gpu["seq"].to_numpy(dtype=np.int64)[idx])):
            cols[k].append(v)
        for k, name in (("coll", "coll_name"), ("pg", "pg")):  # local codes, made global below
            codes, uniq = _strings(gpu[name], idx)
            cols[k].append(codes + seen[k])
            texts[k].append(uniq)
            seen[k] += len(uniq)
    if not cols["rank"]:
        return None
    c = {k: np.concatenate(v) for k, v in cols.items()}
    text = {}
    for k in ("coll", "pg"):
        glob, uniq = pd.factorize(np.concatenate(texts[k]))
        c[k], text[k] = glob[c[k]], np.asarray(uniq, dtype=str)
    combo, _ = _codes(c["pg"], c["coll"], c["gname"], c["role"], c["stream"])
    _, first = np.unique(combo, return_index=True)
    coll, pg = text["coll"][c["coll"][first]], text["pg"][c["pg"][first]]
    norm = _normalized(frames.names[c["gname"][first]])
    role_txt = pd.Series(c["role"][first]).map(role_labels).fillna("").to_numpy(dtype=object)
    role_txt = np.where(role_txt == "", "unpaired stream " + c["stream"][first].astype(str), role_txt)
    group = np.where(pg != "", "pg " + pg.astype(object),
                     np.where(coll != "", "nccl", norm + " @ " + role_txt.astype(object)))
    label = np.asarray(np.where(coll != "", coll, norm), dtype=object)
    gcode, groups = pd.factorize(np.asarray(group, dtype=object), sort=True)
    c["combo"], c["gcode"] = combo, gcode[combo]
    c["lab"] = pd.factorize(label)[0][combo]
    del c["coll"], c["pg"]
    order = np.lexsort((c["start"], c["gcode"], c["rank"]))
    for k in list(c):  # one column at a time: a second copy of one array, not of all of them
        c[k] = c[k][order]
    return _CommRows(c, np.asarray(groups, dtype=object), label)


def _str_column(values: np.ndarray, codes: np.ndarray) -> pd.api.extensions.ExtensionArray:
    """values[codes] as the column pandas infers for those strings, built with one take."""
    return pd.Series(values).array.take(codes)


def _cat_column(values: np.ndarray, codes: np.ndarray) -> pd.Categorical:
    """values[codes] as a categorical (a byte or two a row, where a string column holds each string again)."""
    ucodes, uniq = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=False)
    return pd.Categorical.from_codes(ucodes[codes], categories=pd.Index(uniq, dtype="str"))


def match_collectives(traces: TraceSet, frames: _Frames, role_labels: dict[int, str],
                      params: CrossRankParams, expected_offsets: dict[int, int] | None = None) -> _Matching:
    """The n-th collective of a group on each rank is the same collective (seq when known).

    A group whose ranks ran different numbers of collectives (no seq) is inconsistent, unless
    expected_offsets (a trusted clock) are given and trimming a few collectives at the trace
    edges makes every rank's ends coincide with the reference's (see _trim_at_edges).
    Vectorized: groups are integer codes in their sorted order, collectives codes of
    (group, key, occ), so every step is a sort, a bincount or a reduceat over rows.
    """
    if frames.comm is None:
        frames.comm = _comm_rows(traces, frames, role_labels)
    empty_members = pd.DataFrame(columns=_MEMBER_COLUMNS)
    empty_colls = pd.DataFrame(columns=["coll_id", "group", "index", "seq", "coll_name", "n_ranks"])
    if frames.comm is None:
        return _Matching(empty_members, empty_colls, [], [], ["no communication activity on any rank"])
    c, groups, labels = dict(frames.comm.rows), frames.comm.groups, frames.comm.labels
    gcode, rank = c["gcode"], c["rank"]
    notes: list[str] = []
    unmatched: list[dict[str, Any]] = []
    inconsistent: list[dict[str, Any]] = []

    # seq is used for a group when every row of it, on every rank, carries one.
    gmin = np.full(len(groups), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(gmin, gcode, c["seq"])
    seq_ok = gmin >= 0
    key = np.where(seq_ok[gcode], c["seq"], _runs(rank, gcode))
    occ = np.zeros(len(key), dtype=np.int64)
    if seq_ok.any():  # repeated sequence numbers: counted in row order
        o = np.lexsort((key, gcode, rank))
        occ[o] = _runs(rank[o], gcode[o], key[o])

    ranks = np.unique(rank)
    ri = np.searchsorted(ranks, rank)
    counts = np.bincount(gcode * len(ranks) + ri, minlength=len(groups) * len(ranks)).reshape(len(groups), -1)
    members_per_group = (counts > 0).sum(axis=1)
    lonely = np.flatnonzero(members_per_group < 2)
    for g in lonely:
        who = int(ranks[np.flatnonzero(counts[g] > 0)[0]])
        unmatched.append({"group": groups[g], "rank": who, "count": int(counts[g][ranks == who][0]),
                          "reason": "only this rank runs this communication"})
    bad = np.zeros(len(groups), dtype=bool)
    bad[lonely] = True
    trimmed: set[int] = set()
    for g in np.flatnonzero(~bad & ~seq_ok):  # over groups, not events
        present = counts[g][counts[g] > 0]
        if len(np.unique(present)) <= 1:
            continue
        sel = gcode == g
        shifts = _trim_at_edges(pd.DataFrame({"rank": rank[sel], "end": c["end"][sel]}), expected_offsets,
                                params) if expected_offsets else None
        if shifts is not None:
            key[sel] -= pd.Series(rank[sel]).map(shifts).to_numpy()
            trimmed.add(int(g))
            continue
        bad[g] = True
        inconsistent.append({"group": groups[g], "count": int(present.sum()),
                             "reason": "ranks ran different numbers of these collectives and the trace has "
                                       "no sequence numbers: matching by order would guess",
                             "counts": {str(int(r)): int(v) for r, v in zip(ranks[counts[g] > 0], present,
                                                                             strict=True)}})
    keep = ~bad[gcode]
    if not keep.all():  # (a copy of every row only where some are dropped)
        c = {k: v[keep] for k, v in c.items()}
        key, occ = key[keep], occ[keep]
    gcode, rank = c["gcode"], c["rank"]

    # Matched = a (group, key, occ) present on every rank that runs the group (one row per rank each).
    coll, n_coll = _codes(gcode, key, occ)
    have = np.bincount(coll, minlength=n_coll)[coll]
    full = have == members_per_group[gcode]
    if not full.all():
        pairs = np.unique(gcode[~full] * len(ranks) + np.searchsorted(ranks, rank[~full]), return_counts=True)
        for p, n in zip(*pairs, strict=True):
            g, r = divmod(int(p), len(ranks))
            why = ("at a trace edge: the other ranks' profiles do not cover it (edges found where the "
                   "collective ends coincide)") if g in trimmed else \
                "sequence numbers not seen on every rank of the group"
            unmatched.append({"group": groups[g], "rank": int(ranks[r]), "count": int(n), "reason": why})

    # Inconsistent = matched rows whose collective names differ across ranks.
    lab = c["lab"]
    lo = np.full(n_coll, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(n_coll, -1, dtype=np.int64)
    np.minimum.at(lo, coll, lab)
    np.maximum.at(hi, coll, lab)
    mixed = (lo != hi)[coll] & full
    if mixed.any():
        diff = pd.DataFrame({"group": groups[gcode[mixed]], "key": key[mixed], "occ": occ[mixed],
                             "rank": rank[mixed], "label": labels[c["combo"][mixed]]})
        wide = diff.pivot_table(index=["group", "key", "occ"], columns="rank", values="label", aggfunc="first")
        for (g, k, _o), row in wide.iterrows():  # only the inconsistent collectives, reported one by one
            inconsistent.append({"group": g, "index": int(k), "count": 1,
                                 "reason": "matched kernels are different collectives",
                                 "names": {str(c): str(v) for c, v in row.dropna().items()}})
    keep = full & ~mixed
    if not keep.any():
        return _Matching(empty_members, empty_colls, unmatched, inconsistent, notes)
    if not keep.all():
        c = {k: v[keep] for k, v in c.items()}
        key, occ, coll = key[keep], occ[keep], coll[keep]
    del full, mixed, keep, have

    # Number collectives by their earliest start, so ids read in time order (ties: first seen).
    first = np.full(n_coll, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, coll, c["start"])
    present = np.unique(coll)
    coll_id = np.empty(n_coll, dtype=np.int64)
    coll_id[present[np.argsort(first[present], kind="stable")]] = np.arange(len(present))
    cid = coll_id[coll]
    del coll, coll_id
    o = np.lexsort((c["rank"], cid))
    cid, key, occ = cid[o], key[o], occ[o]
    # Members hold a row per (collective, rank): built from fresh arrays without pandas' copy of them, taken
    # one column at a time (the rows' columns are no longer needed once taken).
    cols: dict[str, Any] = {"coll_id": cid}
    for k in ("rank", "row", "start", "end", "stream", "role"):
        cols[k] = c.pop(k)[o]
    combo, gc, seq = c["combo"][o], c["gcode"][o], c["seq"][o]
    del c, o
    cols.update({"label": _cat_column(labels, combo), "group": _cat_column(groups, gc), "key": key, "occ": occ,
                 "seq": seq})
    members = pd.DataFrame(cols, copy=False)
    heads = np.flatnonzero(np.r_[True, cid[1:] != cid[:-1]])
    colls = pd.DataFrame({"coll_id": cid[heads], "group": _str_column(groups, gc[heads]),
                          "index": key[heads], "seq": np.maximum.reduceat(seq, heads),
                          "coll_name": _str_column(labels, combo[heads]),
                          "n_ranks": np.diff(np.r_[heads, len(cid)])})
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
