"""The cross-rank report and its parameters: plain data, JSON-serializable through to_dict()."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analyzers.io.plain import rows, to_plain
from analyzers.timeline.iterations import DEFAULT_STEP_PATTERN
from analyzers.timeline.model import TraceSet

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
    # Lists in to_dict (collectives: the longest peer waits; unmatched, inconsistent, mismatches) are cut to
    # this many entries; their counts are always complete.
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
    # max_wait_ns, total_wait_ns (its per-rank columns: collectives_by_rank()).
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

    def collectives_by_rank(self) -> pd.DataFrame:
        """The collectives with, per rank r, start_ns_r{r}, end_ns_r{r}, wait_ns_r{r}, transfer_ns_r{r}
        (nullable Int64, NA where the rank is not in the collective), made from the members on each call:
        ranks x collectives values, which `analyze` never reads, so the report does not hold them."""
        per_rank = per_rank_columns(self.members, self.collectives["coll_id"].to_numpy(), self.ranks)
        return pd.concat([self.collectives, pd.DataFrame(per_rank, index=self.collectives.index, copy=False)],
                         axis=1) if per_rank else self.collectives.copy()

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self.document())

    def document(self) -> dict[str, Any]:
        """What to_dict holds, not yet made plain (numpy values, NaN): for a larger document that is
        made plain or encoded once as a whole (analyzers.report)."""
        cap = self.params.max_listed
        return {
            "ranks": self.ranks,
            "reference_rank": self.reference_rank,
            "clock": self.clock.to_dict() if self.clock else None,
            "n_matched": self.n_matched,
            "collectives": rows(listed_collectives(self.collectives, cap)),  # n_matched counts them all
            "n_unmatched": int(sum(u.get("count", 1) for u in self.unmatched)),
            "unmatched": self.unmatched[:cap],
            "n_inconsistent": int(sum(u.get("count", 1) for u in self.inconsistent)),
            "inconsistent": self.inconsistent[:cap],
            "peer_wait": {str(r): v for r, v in self.peer_wait.items()},
            "late_ranks": self.late_ranks,
            **listed_stream_roles(self.stream_roles, STREAM_ROLES_LISTED),
            "n_mismatches": int(len(self.mismatches)),
            "mismatches": rows(self.mismatches.head(cap)),
            "mismatch_summary": listed_order_checks(self.mismatch_summary, cap),
            "params": asdict(self.params),
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------- helpers

def per_rank_columns(members: pd.DataFrame, ids: np.ndarray, ranks: list[int]) -> dict[str, pd.arrays.IntegerArray]:
    """start_ns_r{r}, end_ns_r{r}, wait_ns_r{r}, transfer_ns_r{r} of the collectives `ids` (sorted) per rank,
    nullable Int64 (a rank may be absent): exact epoch nanoseconds, one column per rank and value, built in
    one pass. Each value is one rank-major matrix whose rows are the columns (no copy per column)."""
    if not len(ids) or members.empty:
        return {}
    rank_arr = np.asarray(ranks, dtype=np.int64)
    ci = np.searchsorted(ids, members["coll_id"].to_numpy())
    ri = np.searchsorted(rank_arr, members["rank"].to_numpy())
    absent = np.ones((len(ranks), len(ids)), dtype=bool)
    absent[ri, ci] = False
    mats = {}
    for n in ("start_ns", "end_ns", "wait_ns", "transfer_ns"):
        mat = np.zeros((len(ranks), len(ids)), dtype=np.int64)
        mat[ri, ci] = members[n].to_numpy(dtype=np.int64)
        mats[n] = mat
    out: dict[str, pd.arrays.IntegerArray] = {}
    for j, r in enumerate(ranks):
        mask = absent[j]
        for n, mat in mats.items():
            out[f"{n}_r{r}"] = pd.arrays.IntegerArray(mat[j], mask.copy())
    return out


def listed_collectives(colls: pd.DataFrame, cap: int) -> pd.DataFrame:
    """The matched collectives the document lists: the cap with the longest peer wait (ties: the earlier), in
    their order, without per-rank columns; every one is a row of `analyze --tables` (collectives.parquet)."""
    cols = colls[collective_columns(colls)]
    if len(cols) <= cap or "max_wait_ns" not in cols:
        return cols
    wait = pd.to_numeric(cols["max_wait_ns"], errors="coerce").to_numpy(np.float64)
    top = np.argsort(-np.nan_to_num(wait, nan=-np.inf), kind="stable")[:cap]
    return cols.iloc[np.sort(top)]


STREAM_ROLES_LISTED = 16  # streams a rank's role list in the document holds (every one: --tables stream_roles)


def listed_stream_roles(roles: dict[int, list[dict[str, Any]]], cap: int) -> dict[str, Any]:
    """The document's `stream_roles`: per rank its streams' roles, past `cap` streams the `cap` with the most
    kernels (in their order), and then `n_stream_roles`, each cut rank's full count (every one: `analyze
    --tables`, stream_roles.parquet)."""
    listed, counts = {}, {}
    for r, v in roles.items():
        if len(v) > cap:
            keep = sorted(sorted(range(len(v)), key=lambda i: -v[i]["n"])[:cap])
            listed[str(r)], counts[str(r)] = [v[i] for i in keep], len(v)
        else:
            listed[str(r)] = v
    return {"stream_roles": listed, **({"n_stream_roles": counts} if counts else {})}


def listed_order_checks(summary: dict[str, Any], cap: int) -> dict[str, Any]:
    """The order comparison's summary as the document lists it: its first `cap` checks (one per rank pair and
    stream-role pair: they grow with ranks x streams), with how many there are when cut (every one: `analyze
    --tables`, order_checks.parquet)."""
    checks = summary.get("order_checks")
    if checks is None or len(checks) <= cap:
        return summary
    return {**summary, "n_order_checks": len(checks), "order_checks": checks[:cap]}


_PER_RANK_COLUMN = re.compile(r"_r\d+$")


def collective_columns(colls: pd.DataFrame) -> list[str]:
    """The collectives table's columns about the collective as a whole: its per-rank columns
    (start_ns_r{r}, ...) grow with ranks x collectives, so the JSON document leaves them to the
    long per-(collective, rank) table (`analyze --tables`, members)."""
    return [c for c in colls.columns if not _PER_RANK_COLUMN.search(str(c))]


def _plain(obj: Any) -> Any:
    """JSON-safe copy: numpy scalars -> Python, NaN -> None, tuple -> list, keys -> str (one msgspec pass)."""
    return to_plain(obj)

