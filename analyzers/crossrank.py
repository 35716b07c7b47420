"""Cross-rank analysis: match collectives across ranks, align clocks, split each
collective kernel into waiting-for-peers and transfer, and find ranks that start their
streams' kernels in different orders before a cross-rank dependency (DESIGN.md, Metrics,
"Cross-rank").

Overlap is a per-rank number, but what makes it bad often lies between ranks: a kernel
that spins until the last peer arrives is counted as communication by a per-rank view,
although it moved no data and no compute could have hidden it usefully. Everything here
works on the per-rank ``gpu`` tables with vectorized numpy / pandas; loops run over ranks,
streams, groups or stream-role pairs, never over events.

Vocabulary:
- reference rank: the lowest rank given; offsets and order comparisons are relative to it.
- aligned time: a rank's own time + its offset (offset 0 when the clock is shared).
- stream role: streams of different ranks that run the same kernels are one role.
- same kernel (order comparison): same role, same name, same occurrence counted within its
  launch step and since the last matched collective on its stream, so that profilers opening
  at different moments on different ranks do not shift the pairing.
- group: the collectives that are matched by position (or sequence number) across ranks:
  one per process group when the trace names it, one for NCCL kernels otherwise, and one
  per (kernel name, stream role) for non-NCCL communication (symmetric-memory barriers,
  peer-to-peer copies), whose order is fixed only within a stream.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from . import intervals as iv
from .finding import Finding, Severity
from .iterations import DEFAULT_STEP_PATTERN, assign_steps, gpu_step_windows, host_steps
from .model import RankTrace, TraceSet
from .plain import records, to_plain

_TIME_COLUMNS = ("start_ns", "end_ns")


@dataclass(frozen=True)
class CrossRankParams:
    """Thresholds of the cross-rank analysis; every default says why it is what it is."""

    # Ranks whose matched collective ends already coincide within this (median) share a
    # clock: a collective ends within tens of µs on all ranks (NCCL all-gathers on the 2xH200
    # samples: ~20 µs, systematically), separate clock bases differ by far more.
    shared_clock_tolerance_ns: int = 50_000
    # Without hostnames, a shared clock also needs the ranks' GPU time ranges to overlap by at
    # least this fraction of the shorter one (different clock bases put them far apart).
    min_span_overlap: float = 0.5
    # Collectives whose kernels end together on every rank; their ends estimate the offsets.
    # Peer-to-peer copies and send/recv end when their own transfer ends, so they are used
    # only when nothing else was matched.
    clock_reference_pattern: str = r"(?i)all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|barrier"
    # Estimated offsets are applied only when they bring those ends this close (median);
    # otherwise the matched collectives do not pin the clocks down and the offsets stay 0.
    max_alignment_residual_ns: int = 50_000
    # Collectives between two peers: unless the whole world is the two ranks given, which
    # peers took part is unknown, so no arrival (and no wait) is computed for them.
    p2p_pattern: str = r"(?i)^(sendrecv|send|recv)$"
    # Ranks that start a collective within this of each other arrived together: no late rank.
    min_skew_ns: int = 2_000
    # late-peer: a rank spends at least this fraction of its matched collective kernel time
    # waiting for one late peer ...
    late_peer_min_wait_fraction: float = 0.25
    # ... and critical from this fraction on ...
    late_peer_critical_fraction: float = 0.5
    # ... and the waiting adds up to at least this (ignores a few µs of jitter on tiny traces).
    late_peer_min_wait_ns: int = 50_000
    # ... and the late rank is the last to arrive at at least this share of the collectives
    # that had a late rank: one straggler, not two ranks taking turns (0.5 each).
    late_peer_min_share: float = 0.6
    # Streams of two ranks are one role when their kernel-name multisets are at least this
    # similar (shared kernel count / larger kernel count).
    min_role_similarity: float = 0.5
    # Near-ties in similarity (within this) go to the stream with the same id.
    role_tie_margin: float = 0.05
    # Two kernels are "in an order" on a rank only when their starts differ by more than this;
    # closer starts are simultaneous within launch jitter.
    min_order_gap_ns: int = 1_000
    # cross-rank-order-mismatch finding: the swaps that explain a wait (the rank that ran the other
    # stream's kernel first was the late one at the next collective) add up to at least this ...
    mismatch_min_wait_ns: int = 50_000
    # ... and to at least this fraction of the two ranks' matched collective kernel time (a few
    # µs of jitter-level swaps in a millisecond schedule are not worth a finding) ...
    mismatch_min_wait_fraction: float = 0.05
    # ... critical from this fraction on.
    mismatch_critical_wait_fraction: float = 0.25
    # A rank's profile may start or stop this many collectives (per group) before or after the
    # others'; with a trusted clock such groups are matched where their ends coincide.
    max_edge_trim: int = 3
    # Kernel categories whose start order is compared: the ones that occupy SMs or move data.
    order_categories: tuple[str, ...] = ("compute", "comm")
    # Iteration windows (ProfilerStep#N): order mismatches count only before a dependency in
    # the same iteration.
    step_pattern: str = DEFAULT_STEP_PATTERN
    # Lists in to_dict (unmatched, inconsistent, mismatches) are cut to this many entries;
    # their counts are always complete.
    max_listed: int = 200


@dataclass
class ClockAlignment:
    """How the ranks' clocks were put on one timeline."""

    shared_clock: bool
    method: str  # same-file | same-host | verified-by-collective-ends | session-start | matched-collective-ends
    #              | disabled | none
    reason: str
    applied: bool  # offsets were applied to the tables (False with --no-align)
    offsets_ns: dict[int, int]  # aligned = own + offset
    estimated_offsets_ns: dict[int, int]  # what the matched ends say, applied or not
    residual_skew_ns: int | None  # median over reference collectives of (last end - first end), aligned
    residual_skew_max_ns: int | None
    unaligned_skew_ns: int | None  # the same median before alignment (the evidence for a shared clock)
    n_collectives_used: int
    reference_rank: int
    trusted: bool = False  # the clocks are known: shared, or the estimated offsets made ends coincide

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["offsets_ns"] = {str(k): int(v) for k, v in self.offsets_ns.items()}
        d["estimated_offsets_ns"] = {str(k): int(v) for k, v in self.estimated_offsets_ns.items()}
        return d


@dataclass
class CrossRankReport:
    """Everything the cross-rank analysis found (times on the aligned timeline)."""

    ranks: list[int]
    reference_rank: int
    params: CrossRankParams
    clock: ClockAlignment | None
    # One row per matched collective: id, group, index, seq, coll_name, n_ranks, peers_known,
    # arrival_ns, first_start_ns, skew_ns, late_rank (-1: arrived together), end_spread_ns,
    # max_wait_ns, total_wait_ns, and per rank r: start_ns_r{r}, end_ns_r{r}, wait_ns_r{r},
    # transfer_ns_r{r} (NaN where the rank is not in the collective).
    collectives: pd.DataFrame
    # One row per (collective, rank): coll_id, rank, row (index into that rank's gpu table),
    # stream, start_ns, end_ns (aligned), wait_ns, transfer_ns.
    members: pd.DataFrame
    unmatched: list[dict[str, Any]]
    inconsistent: list[dict[str, Any]]
    peer_wait: dict[int, dict[str, Any]]  # per rank totals
    late_ranks: list[dict[str, Any]]  # per late rank: collectives where last, wait it caused
    stream_roles: dict[int, list[dict[str, Any]]]  # per rank: stream -> role
    mismatches: pd.DataFrame  # one row per (rank, downstream collective) with a start-order swap
    mismatch_summary: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    aligned: TraceSet | None = None  # a copy of the input with the offsets applied (not in to_dict)

    @property
    def n_matched(self) -> int:
        return len(self.collectives)

    def to_dict(self) -> dict[str, Any]:
        cap = self.params.max_listed
        return _plain({
            "ranks": self.ranks,
            "reference_rank": self.reference_rank,
            "clock": self.clock.to_dict() if self.clock else None,
            "n_matched": self.n_matched,
            "collectives": _records(self.collectives),
            "n_unmatched": int(sum(u.get("count", 1) for u in self.unmatched)),
            "unmatched": self.unmatched[:cap],
            "n_inconsistent": int(sum(u.get("count", 1) for u in self.inconsistent)),
            "inconsistent": self.inconsistent[:cap],
            "peer_wait": {str(r): v for r, v in self.peer_wait.items()},
            "late_ranks": self.late_ranks,
            "stream_roles": {str(r): v for r, v in self.stream_roles.items()},
            "n_mismatches": int(len(self.mismatches)),
            "mismatches": _records(self.mismatches.head(cap)),
            "mismatch_summary": self.mismatch_summary,
            "params": asdict(self.params),
            "notes": list(self.notes),
        })


# --------------------------------------------------------------------------- helpers

def _plain(obj: Any) -> Any:
    """JSON-safe copy: numpy scalars -> Python, NaN -> None, tuple -> list, keys -> str."""
    return to_plain(obj)


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return records(df)


_NAME_CUT = re.compile(r"[(<]")


def normalized_name(name: str) -> str:
    """Kernel name without argument list or template arguments: one key per kind of kernel."""
    head = _NAME_CUT.split(name, maxsplit=1)[0].strip()
    return head.removeprefix("void ").strip() or name


def _normalized(names: np.ndarray) -> np.ndarray:
    codes, uniques = pd.factorize(pd.Series(names, dtype=object), use_na_sentinel=False)
    return np.array([normalized_name(str(u)) for u in uniques], dtype=object)[codes] if len(names) else names


@dataclass
class _Frames:
    """Per-rank event frames with names made comparable across ranks."""

    ranks: list[int]
    ref: int
    by_rank: dict[int, pd.DataFrame]  # row, start, end, device, stream, gname, comm (+ role)
    names: np.ndarray  # gname -> kernel name (object array)


def _build_frames(traces: TraceSet) -> _Frames:
    ranks = traces.rank_ids()
    parts, names = [], []
    for r in ranks:
        t = traces.ranks[r]
        g = t.gpu
        names.append(t.names_of(g["name_id"].to_numpy()))
        parts.append(pd.DataFrame({
            "row": np.arange(len(g), dtype=np.int64),
            "start": g["start_ns"].to_numpy(dtype=np.int64),
            "end": g["end_ns"].to_numpy(dtype=np.int64),
            "device": g["device"].to_numpy(),
            "stream": g["stream"].to_numpy(),
            "comm": (g["category"] == "comm").to_numpy(dtype=bool),
        }))
    all_names = np.concatenate(names) if names else np.zeros(0, dtype=object)
    codes, uniques = pd.factorize(pd.Series(all_names, dtype=object), use_na_sentinel=False)
    bounds = np.cumsum([0] + [len(p) for p in parts])
    by_rank = {}
    for i, r in enumerate(ranks):
        df = parts[i]
        df["gname"] = codes[bounds[i]:bounds[i + 1]].astype(np.int64)
        by_rank[r] = df
    return _Frames(ranks=ranks, ref=ranks[0], by_rank=by_rank, names=np.asarray(uniques, dtype=object))


# --------------------------------------------------------------------------- stream roles

def _stream_keys(df: pd.DataFrame) -> pd.DataFrame:
    """Per (device, stream): kernel count, first start and the order of first appearance."""
    g = df.groupby(["device", "stream"], sort=True).agg(n=("start", "size"), first=("start", "min"))
    g = g.reset_index()
    g["appear"] = g["first"].rank(method="first").astype(int) - 1
    return g


def match_stream_roles(frames: _Frames, params: CrossRankParams) -> dict[int, pd.DataFrame]:
    """Role of each (device, stream) of every rank: streams that run the same kernels share one.

    Similarity of two streams = Σ_name min(count_a, count_b) / max(total_a, total_b).
    Greedy best-first assignment; near-ties (role_tie_margin) prefer the same stream id, then
    the same order of first appearance. A stream left without a partner above
    min_role_similarity takes the reference stream of the same id if that one is free;
    otherwise it gets a role of its own (compared with nobody).
    """
    ref = frames.ref
    ref_df = frames.by_rank[ref]
    ref_streams = _stream_keys(ref_df)
    n_roles = len(ref_streams)
    out: dict[int, pd.DataFrame] = {}
    ref_streams["role"] = np.arange(n_roles)
    ref_streams["similarity"] = 1.0
    out[ref] = ref_streams
    names_ref = ref_df.groupby(["device", "stream", "gname"]).size()
    next_role = n_roles
    for r in frames.ranks[1:]:
        df = frames.by_rank[r]
        streams = _stream_keys(df)
        if streams.empty or ref_streams.empty:
            streams["role"] = np.arange(next_role, next_role + len(streams))
            streams["similarity"] = 0.0
            next_role += len(streams)
            out[r] = streams
            continue
        counts = df.groupby(["device", "stream", "gname"]).size()
        gnames = np.union1d(names_ref.index.get_level_values("gname"), counts.index.get_level_values("gname"))
        a = _count_matrix(names_ref, ref_streams, gnames)
        b = _count_matrix(counts, streams, gnames)
        sim = np.vstack([np.minimum(a[i][None, :], b).sum(axis=1) for i in range(a.shape[0])]).astype(float)
        sim /= np.maximum(a.sum(axis=1)[:, None], b.sum(axis=1)[None, :]).clip(min=1)
        same_id = ref_streams["stream"].to_numpy()[:, None] == streams["stream"].to_numpy()[None, :]
        appear = np.abs(ref_streams["appear"].to_numpy()[:, None] - streams["appear"].to_numpy()[None, :])
        score = sim + np.where(same_id, params.role_tie_margin, 0.0)
        ii, jj = np.unravel_index(np.lexsort((appear.ravel(), -score.ravel())), score.shape)
        role = np.full(len(streams), -1, dtype=np.int64)
        simil = np.zeros(len(streams))
        taken = np.zeros(n_roles, dtype=bool)
        for i, j in zip(ii, jj, strict=True):  # over stream pairs, not events
            if taken[i] or role[j] >= 0 or sim[i, j] < params.min_role_similarity:
                continue
            taken[i], role[j], simil[j] = True, i, sim[i, j]
        for j in np.flatnonzero(role < 0):  # stream id fallback
            hit = np.flatnonzero(same_id[:, j] & ~taken)
            if hit.size:
                taken[hit[0]], role[j], simil[j] = True, hit[0], sim[hit[0], j]
        for j in np.flatnonzero(role < 0):
            role[j] = next_role
            next_role += 1
        streams["role"] = role
        streams["similarity"] = simil
        out[r] = streams
    return out


def _count_matrix(counts: pd.Series, streams: pd.DataFrame, gnames: np.ndarray) -> np.ndarray:
    """streams × gnames matrix of kernel counts."""
    mat = np.zeros((len(streams), len(gnames)), dtype=np.int64)
    if counts.empty:
        return mat
    idx = counts.index.to_frame(index=False)
    pos = pd.MultiIndex.from_frame(streams[["device", "stream"]]).get_indexer(
        pd.MultiIndex.from_frame(idx[["device", "stream"]]))
    col = np.searchsorted(gnames, idx["gname"].to_numpy())
    np.add.at(mat, (pos, col), counts.to_numpy())
    return mat


def _attach_roles(frames: _Frames, roles: dict[int, pd.DataFrame]) -> None:
    for r, df in frames.by_rank.items():
        m = roles[r]
        key = pd.MultiIndex.from_frame(m[["device", "stream"]])
        pos = key.get_indexer(pd.MultiIndex.from_frame(df[["device", "stream"]]))
        df["role"] = m["role"].to_numpy()[pos] if len(df) else np.zeros(0, dtype=np.int64)


def _role_labels(roles: dict[int, pd.DataFrame], ref: int) -> dict[int, str]:
    """Role id -> 'stream <its id on the reference rank>'."""
    ref_roles = roles[ref]
    return {int(role): f"stream {int(stream)}" for role, stream in zip(ref_roles["role"], ref_roles["stream"],
                                                                       strict=True)}


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


# --------------------------------------------------------------------------- clock alignment

def _reference_mask(colls: pd.DataFrame, params: CrossRankParams) -> np.ndarray:
    """Collectives whose ends should coincide on all ranks (per collective id)."""
    rx = re.compile(params.clock_reference_pattern)
    names = colls["coll_name"].astype(str)
    uniq = names.unique()
    hit = {u: bool(rx.search(u)) for u in uniq}
    return names.map(hit).to_numpy(dtype=bool)


def _end_matrix(members: pd.DataFrame, ranks: list[int], ids: np.ndarray) -> pd.DataFrame:
    """collective × rank matrix of ends, relative to the earliest end: the pivot is float (NaN
    where a rank is absent), and epoch nanoseconds would lose ~100 ns in a float64."""
    sub = members[members["coll_id"].isin(ids)]
    rel = sub.assign(end=(sub["end"] - sub["end"].min()).astype(np.int64))
    return rel.pivot_table(index="coll_id", columns="rank", values="end", aggfunc="first").reindex(columns=ranks)


def estimate_offsets(ends: pd.DataFrame, ranks: list[int]) -> tuple[dict[int, int], list[int]]:
    """offset_r = median(end_ref - end_r) over collectives both run; ranks that share none with
    the reference are reached through other ranks. Returns offsets and unreachable ranks."""
    ref = ranks[0]
    offsets = {ref: 0}
    pending = [r for r in ranks[1:]]
    progress = True
    while pending and progress:
        progress = False
        for r in list(pending):
            for s in list(offsets):
                both = ends[[s, r]].dropna()
                if len(both):
                    d = (both[s].to_numpy(dtype=np.int64) - both[r].to_numpy(dtype=np.int64))
                    offsets[r] = offsets[s] + int(np.rint(np.median(d)))
                    pending.remove(r)
                    progress = True
                    break
    for r in pending:
        offsets[r] = 0
    return {r: offsets[r] for r in ranks}, pending


def _skew(ends: pd.DataFrame, offsets: dict[int, int]) -> tuple[int | None, int | None]:
    """Median and max over collectives of (last aligned end - first aligned end)."""
    if ends.empty:
        return None, None
    shifted = ends + pd.Series(offsets).reindex(ends.columns).to_numpy(dtype=float)[None, :]
    spread = (shifted.max(axis=1) - shifted.min(axis=1)).dropna()
    spread = spread[ends.notna().sum(axis=1) >= 2]
    if spread.empty:
        return None, None
    return int(np.rint(spread.median())), int(spread.max())


def _span_overlap(traces: TraceSet) -> float:
    """Overlap of the ranks' GPU time ranges, as a fraction of the shortest range."""
    lo, hi, lens = [], [], []
    for t in traces:
        if t.gpu.empty:
            continue
        s, e = int(t.gpu["start_ns"].min()), int(t.gpu["end_ns"].max())
        lo.append(s)
        hi.append(e)
        lens.append(max(e - s, 1))
    if len(lo) < 2:
        return 0.0
    return max(min(hi) - max(lo), 0) / min(lens)


def _clock_from_metadata(traces: TraceSet) -> tuple[bool, str, str] | None:
    """(shared, method, reason) when the files say it; None when only the events can tell."""
    all_traces = list(traces)
    hosts = {t.hostname for t in all_traces}
    sources = {t.source for t in all_traces}
    sessions = {t.meta.get("session_start_utc_ns") for t in all_traces}
    if len(sources) == 1 and len(all_traces) > 1:
        return True, "same-file", "all ranks come from one report, recorded on one clock"
    if "" not in hosts and len(hosts) == 1 and (traces.fmt != "nsys" or (len(sessions) == 1 and None not in sessions)):
        return True, "same-host", f"all ranks ran on host {next(iter(hosts))!r}"
    if "" not in hosts and len(hosts) > 1:
        return False, "matched-collective-ends", f"ranks ran on {len(hosts)} hosts"
    return None


def _session_offsets(traces: TraceSet) -> dict[int, int] | None:
    """Offsets of separate Nsight Systems sessions on one host, from their start times.

    nsys counts from each session's start, which it records in UTC (utcEpochNs); on one host
    those come from one clock, so offset_r = start_r - start_ref places every rank on the
    reference's timeline without relying on collective ends (which carry a systematic
    end-time asymmetry of a few µs between ranks).
    """
    all_traces = list(traces)
    hosts = {t.hostname for t in all_traces}
    starts = {t.rank: t.meta.get("session_start_utc_ns") for t in all_traces}
    if traces.fmt != "nsys" or "" in hosts or len(hosts) != 1 or any(v is None for v in starts.values()):
        return None
    ref = min(starts)
    return {r: int(v) - int(starts[ref]) for r, v in starts.items()}


def align_clocks(traces: TraceSet, m: _Matching, align: bool, params: CrossRankParams) -> tuple[ClockAlignment,
                                                                                               list[str]]:
    """Decide whether the ranks share a clock; otherwise estimate offsets from collective ends."""
    ranks = traces.rank_ids()
    ref = ranks[0]
    notes: list[str] = []
    zero = {r: 0 for r in ranks}
    session = _session_offsets(traces)
    if m.colls.empty:
        known = _clock_from_metadata(traces)
        shared, method, reason = known if known else (False, "none", "")
        offs = session if (known is None and session is not None and align) else zero
        if offs is session:
            method, reason = "session-start", "one host, separate nsys sessions: offsets from their start times"
        reason = (reason + "; " if reason else "") + "no collective matched across ranks to check it"
        return ClockAlignment(shared, "disabled" if not align else method, reason, any(offs.values()), offs,
                              session or zero, None, None, None, 0, ref,
                              trusted=shared or session is not None), notes
    refmask = _reference_mask(m.colls, params)
    ids = m.colls["coll_id"].to_numpy()
    used = ids[refmask] if refmask.any() else ids
    if not refmask.any():
        notes.append("no all-reduce / all-gather / reduce-scatter / barrier matched: clock offsets come from "
                     "peer-to-peer communication ends, which need not coincide")
    ends = _end_matrix(m.members, ranks, used)
    estimated, unreachable = estimate_offsets(ends, ranks)
    if unreachable:
        notes.append(f"ranks {unreachable} share no matched collective with the others: their offset is 0")
    before_med, _ = _skew(ends, zero)
    tol = params.shared_clock_tolerance_ns
    ends_agree = before_med is not None and before_med <= tol

    hosts = {t.hostname for t in traces}
    known = _clock_from_metadata(traces)
    if known is not None:
        shared, method, reason = known
    elif session is not None:
        shared, method = False, "session-start"
        est_res, _ = _skew(ends, estimated)
        reason = ("one host, separate nsys sessions: offsets from the sessions' start times; matched collective "
                  f"ends leave {_skew(ends, session)[0]} ns (median) with them and {est_res} ns with their own "
                  "best offsets")
    else:
        overlap = _span_overlap(traces)
        why = "host unknown" if "" in hosts else "one host, but separate profiling sessions"
        if overlap >= params.min_span_overlap and ends_agree:
            shared, method = True, "verified-by-collective-ends"
            reason = (f"{why}; GPU time ranges overlap {overlap:.0%} and matched collective ends differ by "
                      f"{before_med} ns (median) without any offset")
        else:
            shared, method = False, "matched-collective-ends"
            reason = (f"{why}; GPU time ranges overlap {overlap:.0%}, matched collective ends differ by "
                      f"{before_med} ns (median) as recorded")
    if shared and not ends_agree and before_med is not None:
        notes.append(f"the ranks share a clock ({method}) but matched collective ends differ by {before_med} ns "
                     "(median): the order-matched collectives may not be the same ones")
    offsets = zero if shared else (session if method == "session-start" else estimated)
    est_med, _ = _skew(ends, estimated)
    trusted = shared or method == "session-start" or (est_med is not None
                                                       and est_med <= params.max_alignment_residual_ns)
    if not trusted:
        notes.append(f"clock offsets not applied: even the best offsets leave matched collective ends "
                     f"{est_med} ns apart (median), so these collectives do not pin the clocks down")
        offsets, method = zero, "none"
    if not align:
        if not shared and any(estimated.values()):
            notes.append("clocks not aligned (--no-align): the matched collective ends suggest offsets "
                         + ", ".join(f"rank {r}: {v} ns" for r, v in estimated.items() if r != ref))
        offsets, method = zero, "disabled"
    res_med, res_max = _skew(ends, offsets)
    return ClockAlignment(
        shared_clock=shared, method=method, reason=reason, applied=any(offsets.values()),
        offsets_ns=dict(offsets), estimated_offsets_ns=dict(estimated),
        residual_skew_ns=res_med, residual_skew_max_ns=res_max, unaligned_skew_ns=before_med,
        n_collectives_used=int(len(ends)), reference_rank=ref, trusted=trusted), notes


def aligned_copy(traces: TraceSet, offsets_ns: dict[int, int]) -> TraceSet:
    """A TraceSet whose tables are shifted by the offsets (copies; the input is not modified)."""
    ranks: dict[int, RankTrace] = {}
    for r, t in traces.ranks.items():
        off = int(offsets_ns.get(r, 0))
        if off == 0:
            ranks[r] = t
            continue
        shifted = {}
        for name in ("gpu", "runtime", "host_ops", "sync_events"):
            tab = getattr(t, name).copy()
            for c in _TIME_COLUMNS:
                if c in tab:
                    tab[c] = tab[c].to_numpy(dtype=np.int64) + off
            shifted[name] = tab
        ranks[r] = replace(t, **shifted, meta={**t.meta, "clock_offset_ns": off})
    offs = {r: int(offsets_ns.get(r, 0)) for r in traces.ranks}
    return replace(traces, ranks=ranks, clock_offsets_ns=offs, notes=list(traces.notes))


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
            waited_for = mr.assign(late=mr["coll_id"].map(late).to_numpy())
            waited_for = waited_for[(waited_for["late"] >= 0) & (waited_for["late"] != r)]
            by_late = waited_for.groupby("late")["wait_ns"].sum()
        else:
            comm_ns = transfer_u_ns = ov = ov_tr = wait_ns = transfer_ns = 0
            by_late = pd.Series(dtype=np.int64)
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


# --------------------------------------------------------------------------- scheduling-order mismatch

_MISMATCH_COLUMNS = [
    "rank_a", "rank_b", "step", "coll_id", "coll_name", "n_swapped_pairs",
    "kernel_x", "stream_x", "kernel_y", "stream_y",
    "x_start_ns_a", "y_start_ns_a", "x_start_ns_b", "y_start_ns_b", "first_on_a", "first_on_b",
    "dependency_start_ns", "dependency_stream", "wait_caused_ns", "max_wait_ns", "waiting_rank", "late_rank",
    "delaying_rank", "explains_wait",
]


def find_order_mismatches(traces: TraceSet, frames: _Frames, role_labels: dict[int, str], colls: pd.DataFrame,
                          members: pd.DataFrame, offsets: dict[int, int],
                          params: CrossRankParams) -> tuple[pd.DataFrame, dict[str, Any], list[str]]:
    """Kernel pairs on two role-matched streams that start in one order on the reference rank and
    in the other order on rank b, followed (on either stream, same iteration) by a matched
    collective: that collective's peer wait is the cost.

    "Same kernel" = same stream role, same name, same position counted from the last matched
    collective on that stream (see _kernel_keys). Only compute and comm kernels take part
    (params.order_categories): a memset or the ordering sleep kernel itself occupies no SMs.
    Vectorized per stream-role pair: for each kernel x on role X, the Y kernels definitely after
    x on rank a (start > x + gap) and definitely before x on rank b (start < x - gap) are a suffix
    and a prefix of Y's FIFO order, so two searchsorted calls find them all.
    """
    ref = frames.ref
    gap = params.min_order_gap_ns
    notes: list[str] = []
    empty = pd.DataFrame(columns=_MISMATCH_COLUMNS)
    summary: dict[str, Any] = {"n_mismatches": 0, "n_swapped_pairs": 0, "n_swaps_without_dependency": 0,
                               "wait_caused_ns": 0, "n_explaining_wait": 0, "kernels_compared": 0,
                               "role_pairs": 0}
    if frames.by_rank[ref].empty or len(frames.ranks) < 2:
        return empty, summary, notes
    keyed = {r: _kernel_keys(traces.ranks[r], frames.by_rank[r], members, r, params) for r in frames.ranks}
    a = keyed[ref]
    loose = a[(a["seg"] == -2) & (a["anchor"] == -1)]["role"].unique()
    if len(loose):
        notes.append(f"no step ranges and no collective on {', '.join(role_labels.get(int(x), str(x)) for x in loose)}"
                     ": its kernels are paired by occurrence since the trace start, which a profiler window opening "
                     "at a different kernel on each rank would shift")
    deps = a[a["coll_id"] >= 0].sort_values("start", kind="stable")
    dep_by_role = {int(r): (g["start"].to_numpy(), g["coll_id"].to_numpy(), g["step"].to_numpy())
                   for r, g in deps.groupby("role")}
    coll_info = colls.set_index("coll_id") if len(colls) else None
    wait_cols = {r: f"wait_ns_r{r}" for r in frames.ranks}
    rows: list[pd.DataFrame] = []
    checks: list[dict[str, Any]] = []
    summary["order_checks"] = checks
    skipped_roles: set[tuple[int, int]] = set()
    for rb in frames.ranks[1:]:
        b = keyed[rb]
        if b.empty:
            continue
        both = a.merge(b[["role", "seg", "anchor", "gname", "k", "start"]], on=["role", "seg", "anchor", "gname", "k"],
                       suffixes=("_a", "_b"))
        roles = sorted(both["role"].unique().tolist())
        by_role = {r: g.sort_values("start_a", kind="stable") for r, g in both.groupby("role")}
        prod = both[both["compute"].to_numpy()]
        firsts = prod.groupby(["role", "step"])[["start_a", "start_b"]].min()
        for i, rx in enumerate(roles):
            for ry in roles[i + 1:]:
                xs, ys = by_role[rx], by_role[ry]
                ya, yb = ys["start_a"].to_numpy(), ys["start_b"].to_numpy()
                if np.any(np.diff(yb) < 0) or np.any(np.diff(xs["start_b"].to_numpy()) < 0):
                    skipped_roles.add((rx, ry))  # FIFO order differs: the role match is wrong
                    continue
                summary["role_pairs"] += 1
                summary["kernels_compared"] += len(xs) + len(ys)
                xa, xb = xs["start_a"].to_numpy(), xs["start_b"].to_numpy()
                hi_a = np.searchsorted(ya, xa + gap, side="right")  # y's from here start after x on a
                lo_b = np.searchsorted(yb, xb - gap, side="left")  # y's before here start before x on b
                lo_a = np.searchsorted(ya, xa - gap, side="left")
                hi_b = np.searchsorted(yb, xb + gap, side="right")
                sw1, sw2 = lo_b > hi_a, lo_a > hi_b  # x first on a / y first on a
                hit = sw1 | sw2
                checks.append(_order_check(ref, rb, role_labels.get(rx, str(rx)), role_labels.get(ry, str(ry)),
                                           xs, ys, (hi_a > lo_a) | (hi_b > lo_b), hit, firsts, rx, ry,
                                           params.max_listed))
                if not hit.any():
                    continue
                j = np.where(sw1, hi_a, hi_b)[hit]
                n_pairs = np.where(sw1, lo_b - hi_a, lo_a - hi_b)[hit]
                xh = xs.iloc[np.flatnonzero(hit)]
                yh = ys.iloc[j]
                t0 = np.minimum(xh["start_a"].to_numpy(), yh["start_a"].to_numpy())
                step0 = np.minimum(xh["step"].to_numpy(), yh["step"].to_numpy())
                dep_t, dep_id, on_y = _next_dependency(t0, step0, [dep_by_role.get(rx), dep_by_role.get(ry)])
                # The rank that ran the kernel of the stream *without* the dependency first delays
                # the dependency; if the swap explains the wait, that rank is the late one there.
                x_first_a = sw1[hit]
                delayer = np.where(on_y == x_first_a, ref, rb)
                rows.append(pd.DataFrame({
                    "rank_a": ref, "rank_b": rb, "step": step0, "coll_id": dep_id, "n_swapped_pairs": n_pairs,
                    "kernel_x": frames.names[xh["gname"].to_numpy()], "stream_x": role_labels.get(rx, str(rx)),
                    "kernel_y": frames.names[yh["gname"].to_numpy()], "stream_y": role_labels.get(ry, str(ry)),
                    "x_start_ns_a": xh["start_a"].to_numpy() + offsets.get(ref, 0),
                    "y_start_ns_a": yh["start_a"].to_numpy() + offsets.get(ref, 0),
                    "x_start_ns_b": xh["start_b"].to_numpy() + offsets.get(rb, 0),
                    "y_start_ns_b": yh["start_b"].to_numpy() + offsets.get(rb, 0),
                    "first_on_a": np.where(sw1[hit], "x", "y"), "first_on_b": np.where(sw1[hit], "y", "x"),
                    "dependency_start_ns": dep_t + offsets.get(ref, 0),
                    "dependency_stream": np.where(on_y, role_labels.get(ry, str(ry)), role_labels.get(rx, str(rx))),
                    "delaying_rank": delayer,
                }))
    if skipped_roles:
        notes.append(f"{len(skipped_roles)} stream-role pairs skipped: the same stream runs its kernels in a "
                     "different order on another rank, so its kernels cannot be paired")
    if not rows:
        return empty, summary, notes
    det = pd.concat(rows, ignore_index=True)
    summary["n_swaps_without_dependency"] = int((det["coll_id"] < 0).sum())
    det = det[det["coll_id"] >= 0]
    if det.empty:
        return empty, summary, notes
    # One mismatch per (rank pair, downstream collective): the earliest swapped pair stands for it.
    det = det.assign(_t=np.minimum(det["x_start_ns_a"], det["y_start_ns_a"]))
    det = det.sort_values(["rank_b", "coll_id", "_t"], kind="stable")
    n_pairs = det.groupby(["rank_b", "coll_id"])["n_swapped_pairs"].transform("sum")
    out = det.assign(n_swapped_pairs=n_pairs.to_numpy()).drop_duplicates(["rank_b", "coll_id"]).drop(columns="_t")
    ci = coll_info.reindex(out["coll_id"].to_numpy()) if coll_info is not None else None
    out["coll_name"] = ci["coll_name"].to_numpy() if ci is not None else ""
    pair_wait = np.zeros(len(out), dtype=np.int64)
    waiting = np.full(len(out), -1, dtype=np.int64)
    for rank_b in out["rank_b"].unique():  # over ranks: wait of the two ranks compared, at that collective
        sel = (out["rank_b"] == rank_b).to_numpy()
        wa = ci[wait_cols[ref]].to_numpy(dtype=float, na_value=np.nan)[sel]
        wb = ci[wait_cols[int(rank_b)]].to_numpy(dtype=float, na_value=np.nan)[sel]
        wa, wb = np.nan_to_num(wa), np.nan_to_num(wb)
        pair_wait[sel] = np.maximum(wa, wb).astype(np.int64)
        waiting[sel] = np.where(wb > wa, int(rank_b), ref)
    out["wait_caused_ns"] = pair_wait
    out["waiting_rank"] = np.where(pair_wait > 0, waiting, -1)
    out["max_wait_ns"] = ci["max_wait_ns"].to_numpy() if ci is not None else 0
    out["late_rank"] = ci["late_rank"].to_numpy() if ci is not None else -1
    out["explains_wait"] = (out["late_rank"].to_numpy() == out["delaying_rank"].to_numpy()) & (pair_wait > 0)
    out = out[_MISMATCH_COLUMNS].sort_values(["dependency_start_ns", "rank_b"], kind="stable").reset_index(drop=True)
    explains = out["explains_wait"].to_numpy(dtype=bool)
    summary.update({"n_mismatches": int(len(out)), "n_swapped_pairs": int(out["n_swapped_pairs"].sum()),
                    "wait_caused_ns": int(out["wait_caused_ns"].to_numpy()[explains].sum()),
                    "n_explaining_wait": int(explains.sum())})
    return out, summary, notes


def _kernel_keys(trace: RankTrace, df: pd.DataFrame, members: pd.DataFrame, rank: int,
                 params: CrossRankParams) -> pd.DataFrame:
    """The kernels of one rank that take part in order comparison, with a key that names the
    same kernel on every rank: (role, seg, anchor, gname, k).

    Profilers open and close at slightly different moments on each rank, so "the k-th kernel of
    this name on this stream" must be counted from something every rank has:
    - seg: the iteration whose host step launched the kernel (ProfilerStep#N carries the same N
      on every rank); -1 for kernels before the first step, -2 after the last or without steps;
    - anchor: the matched collective last issued on the same stream (FIFO: the same on every
      rank, whatever the timing);
    - k: occurrence of that name since (seg, anchor). Where the trace may be cut at the front
      (before the first step, or before a stream's first collective when there are no steps),
      k counts backwards instead.
    """
    cat = trace.gpu["category"]
    keep = cat.isin(list(params.order_categories)).to_numpy()
    d = df[keep[df["row"].to_numpy()]].sort_values(["role", "start"], kind="stable").copy()
    d["compute"] = (cat.to_numpy() == "compute")[d["row"].to_numpy()]
    mine = members[members["rank"] == rank] if len(members) else members
    coll_of_row = pd.Series(mine["coll_id"].to_numpy(), index=mine["row"].to_numpy()) if len(mine) else \
        pd.Series(dtype=np.int64)
    d["coll_id"] = coll_of_row.reindex(d["row"].to_numpy()).fillna(-1).to_numpy(dtype=np.int64)
    steps = host_steps(trace, params.step_pattern)
    has_steps = not steps.empty
    if has_steps:
        step = assign_steps(trace, steps)[d["row"].to_numpy()]
        windows = gpu_step_windows(trace, params.step_pattern)
        first = int(windows["gpu_start_ns"].min()) if len(windows) else np.iinfo(np.int64).max
        d["seg"] = np.where(step >= 0, step, np.where(d["start"].to_numpy() < first, -1, -2))
    else:
        d["seg"] = -2
    marks = d["coll_id"].where(d["coll_id"] >= 0)
    after = marks.groupby(d["role"]).ffill()
    before = marks.groupby(d["role"]).bfill()
    head = after.isna().to_numpy()
    d["anchor"] = np.where(~head, after.fillna(-1).to_numpy(),
                           np.where(before.notna().to_numpy(), -2 - before.fillna(0).to_numpy(), -1)).astype(np.int64)
    by = ["role", "seg", "anchor", "gname"]
    fwd = d.groupby(by).cumcount().to_numpy()
    back = d.groupby(by).cumcount(ascending=False).to_numpy()
    cut_front = (d["seg"].to_numpy() == -1) if has_steps else (head & (d["anchor"].to_numpy() <= -2))
    d["k"] = np.where(cut_front, -1 - back, fwd)
    d["step"] = np.maximum(d["seg"].to_numpy(), -1)
    return d


def _order_check(ra: int, rb: int, sx: str, sy: str, xs: pd.DataFrame, ys: pd.DataFrame, ties: np.ndarray,
                 hit: np.ndarray, firsts: pd.DataFrame, rx: int, ry: int, cap: int) -> dict[str, Any]:
    """The evidence behind a verdict for one rank pair and stream-role pair, also when nothing
    was found: how many kernels were compared, how many started too close to judge, and per
    iteration which stream's first compute kernel started first on each rank
    (lead = first Y compute start - first X compute start; steps where a stream computes nothing
    are left out; the per-step lists are cut at cap)."""
    roles = firsts.index.get_level_values("role")
    fx = firsts.loc[rx] if rx in roles else firsts.iloc[:0].droplevel("role")
    fy = firsts.loc[ry] if ry in roles else firsts.iloc[:0].droplevel("role")
    steps = fx.index.intersection(fy.index)
    lead_a = (fy.loc[steps, "start_a"] - fx.loc[steps, "start_a"]).to_numpy()
    lead_b = (fy.loc[steps, "start_b"] - fx.loc[steps, "start_b"]).to_numpy()
    agree = np.sign(lead_a) == np.sign(lead_b)
    return {
        "rank_a": ra, "rank_b": rb, "stream_x": sx, "stream_y": sy,
        "kernels_x": int(len(xs)), "kernels_y": int(len(ys)),
        "near_ties": int(ties.sum()), "swapped": int(hit.sum()),
        "steps": int(len(steps)), "steps_same_first_stream": int(agree.sum()),
        "first_lead_ns_a": [int(v) for v in lead_a[:cap]], "first_lead_ns_b": [int(v) for v in lead_b[:cap]],
    }


def _next_dependency(t0: np.ndarray, step0: np.ndarray, cands: list[tuple[np.ndarray, np.ndarray, np.ndarray] | None]
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """First matched collective at or after t0 on either stream (cands: X's, Y's), in the same
    iteration: its start (-1: none), its id (-1) and whether it is on the second stream (Y)."""
    best_t = np.full(t0.size, np.iinfo(np.int64).max, dtype=np.int64)
    best_id = np.full(t0.size, -1, dtype=np.int64)
    on_second = np.zeros(t0.size, dtype=bool)
    for i, c in enumerate(cands):
        if c is None or c[0].size == 0:
            continue
        starts, ids, steps = c
        k = np.searchsorted(starts, t0, side="left")
        ok = k < starts.size
        kc = np.clip(k, 0, starts.size - 1)
        ok &= steps[kc] == step0
        better = ok & (starts[kc] < best_t)
        best_t = np.where(better, starts[kc], best_t)
        best_id = np.where(better, ids[kc], best_id)
        on_second = np.where(better, i == 1, on_second)
    return np.where(best_id >= 0, best_t, -1), best_id, on_second


# --------------------------------------------------------------------------- entry points

def analyze_cross_rank(traces: TraceSet, *, align: bool = True,
                       params: CrossRankParams | None = None) -> CrossRankReport:
    """Match collectives, align clocks, measure peer wait and find scheduling-order mismatches."""
    params = params or CrossRankParams()
    ranks = traces.rank_ids()
    empty_df = pd.DataFrame()
    if len(ranks) < 2:
        return CrossRankReport(ranks=ranks, reference_rank=ranks[0] if ranks else -1, params=params, clock=None,
                               collectives=empty_df, members=empty_df, unmatched=[], inconsistent=[], peer_wait={},
                               late_ranks=[], stream_roles={}, mismatches=pd.DataFrame(columns=_MISMATCH_COLUMNS),
                               mismatch_summary={}, notes=["cross-rank analysis needs two or more ranks"],
                               aligned=traces)
    frames = _build_frames(traces)
    roles = match_stream_roles(frames, params)
    _attach_roles(frames, roles)
    labels = _role_labels(roles, frames.ref)
    matching = match_collectives(traces, frames, labels, params)
    clock, clock_notes = align_clocks(traces, matching, align, params)
    if any("counts" in d for d in matching.inconsistent):
        zero = {r: 0 for r in ranks}
        if clock.trusted:
            expected = zero if clock.shared_clock else clock.estimated_offsets_ns
            matching = match_collectives(traces, frames, labels, params, expected_offsets=expected)
        elif (matching.colls.empty and _clock_from_metadata(traces) is None
              and _span_overlap(traces) >= params.min_span_overlap):
            # Nothing matched and nothing says whose clock is whose: try the shared clock. Edges
            # are trimmed only where ends then coincide, which is the evidence for that clock.
            trial = match_collectives(traces, frames, labels, params, expected_offsets=zero)
            if not trial.colls.empty:
                matching = trial
                clock, clock_notes = align_clocks(traces, matching, align, params)
    notes = list(matching.notes) + clock_notes
    offsets = clock.offsets_ns
    colls, members, pw_notes = peer_wait(matching, ranks, offsets, params, traces.world_size)
    notes += pw_notes
    totals, late_rows = peer_wait_totals(traces, colls, members, offsets, params)
    mism, msum, m_notes = find_order_mismatches(traces, frames, labels, colls, members, offsets, params)
    notes += m_notes
    stream_roles = {
        r: [{"device": int(d), "stream": int(s), "role": labels.get(int(ro), "own role (no partner)"),
             "similarity": float(si), "n": int(n)}
            for d, s, ro, si, n in zip(df["device"], df["stream"], df["role"], df["similarity"], df["n"],
                                       strict=True)]
        for r, df in roles.items()
    }
    return CrossRankReport(
        ranks=ranks, reference_rank=frames.ref, params=params, clock=clock, collectives=colls,
        members=members.drop(columns=["arrival"], errors="ignore"), unmatched=matching.unmatched,
        inconsistent=matching.inconsistent, peer_wait=totals, late_ranks=late_rows, stream_roles=stream_roles,
        mismatches=mism, mismatch_summary=msum, notes=notes, aligned=aligned_copy(traces, offsets))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _us(ns: float) -> str:
    return f"{ns / 1e3:,.1f} µs" if abs(ns) < 1e6 else f"{ns / 1e6:,.2f} ms"


def cross_rank_findings(report: CrossRankReport) -> list[Finding]:
    """late-peer and cross-rank-order-mismatch findings from a cross-rank report."""
    p = report.params
    findings: list[Finding] = []
    cols = report.collectives
    for late in report.late_ranks:
        lr = late["rank"]
        waiters = []
        for r, tot in report.peer_wait.items():
            w = tot["wait_for_rank_ns"].get(str(lr), 0)
            if r != lr and tot["kernel_ns"]:
                waiters.append((r, w, w / tot["kernel_ns"]))
        strong = [(r, w, f) for r, w, f in waiters if f >= p.late_peer_min_wait_fraction]
        caused = sum(w for _, w, _ in waiters)
        if not strong or caused < p.late_peer_min_wait_ns or late["share_of_late_collectives"] < p.late_peer_min_share:
            continue
        worst_frac = max(f for _, _, f in strong)
        sev = Severity.critical if worst_frac >= p.late_peer_critical_fraction else Severity.warning
        sig = cols[cols["late_rank"] == lr]
        wr = ", ".join(f"rank {r} {f:.0%}" for r, _, f in strong)
        findings.append(Finding(
            id="late-peer", severity=sev, ranks=[lr] + [r for r, _, _ in strong],
            title=f"rank {lr} arrives last at {_plural(late['n_collectives_last'], 'collective')}; peers wait "
                  f"{_us(caused)} "
                  f"for it ({wr} of their collective kernel time)",
            explanation=(f"A collective moves no data until its last rank arrives. Rank {lr} started last at "
                         f"{late['n_collectives_last']} of the matched collectives, so the other ranks' "
                         "communication kernels spent that time spinning: it is waiting, not communication that "
                         "compute could hide, and it delays everything queued behind it on their streams."),
            start_ns=int(sig["first_start_ns"].min()) if len(sig) else None,
            end_ns=int(sig["arrival_ns"].max()) if len(sig) else None,
            evidence={"late_rank": lr, "n_collectives_last": late["n_collectives_last"],
                      "wait_caused_ns": caused, "worst_coll_id": late["worst_coll_id"],
                      "worst_wait_ns": late["worst_wait_ns"],
                      "wait_fraction_by_rank": {str(r): f for r, _, f in waiters}},
        ))
    mm = report.mismatches
    if len(mm):
        mm = mm[mm["explains_wait"].to_numpy(dtype=bool)]  # swaps whose delaying rank was the late one
        for rb, grp in mm.groupby("rank_b"):
            wait = int(grp["wait_caused_ns"].sum())
            ra = int(grp["rank_a"].iloc[0])
            comm = sum(report.peer_wait.get(r, {}).get("kernel_ns", 0) for r in (ra, int(rb)))
            share = wait / comm if comm else 0.0
            if wait < p.mismatch_min_wait_ns or share < p.mismatch_min_wait_fraction:
                continue
            sev = Severity.critical if share >= p.mismatch_critical_wait_fraction else Severity.warning
            ex = grp.sort_values("wait_caused_ns", ascending=False).iloc[0]
            kx = f"{normalized_name(ex['kernel_x'])} ({ex['stream_x']})"
            ky = f"{normalized_name(ex['kernel_y'])} ({ex['stream_y']})"
            fa = (kx, ky) if ex["first_on_a"] == "x" else (ky, kx)
            findings.append(Finding(
                id="cross-rank-order-mismatch", severity=sev, ranks=[ra, int(rb)],
                title=f"ranks {ra} and {int(rb)} start kernels of two streams in different orders before "
                      f"{_plural(len(grp), 'collective')}, which then waited {_us(wait)}",
                explanation=(f"e.g. in step {int(ex['step'])}: rank {ra} started {fa[0]} before {fa[1]}, rank "
                             f"{int(rb)} the other way round. The next cross-rank dependency "
                             f"({normalized_name(ex['coll_name'])} on {ex['dependency_stream']}) started late on "
                             f"rank {int(ex['delaying_rank'])}, which had run the other stream's kernel first, and "
                             f"rank {int(ex['waiting_rank'])} waited "
                             f"{_us(int(ex['wait_caused_ns']))} for it."),
                start_ns=int(min(ex["x_start_ns_a"], ex["y_start_ns_a"])),
                end_ns=int(ex["dependency_start_ns"]),
                evidence={"n_mismatches_explaining_wait": int(len(grp)),
                          "n_mismatches": int((report.mismatches["rank_b"] == rb).sum()),
                          "n_swapped_pairs": int(grp["n_swapped_pairs"].sum()),
                          "wait_caused_ns": wait, "share_of_collective_kernel_time": share,
                          "example": _plain(ex.to_dict())},
            ))
    return findings
