"""Cross-rank analysis: match collectives across ranks, align clocks, split each
collective kernel into waiting-for-peers and transfer, and find ranks that start their
streams' kernels in different orders before a cross-rank dependency (DESIGN.md, Metrics,
"Cross-rank").

Overlap is a per-rank number, but what makes it bad often lies between ranks: a kernel
that spins until the last peer arrives is counted as communication by a per-rank view,
although it moved no data and no compute could have hidden it usefully. Everything here
works on the per-rank ``gpu`` tables with vectorized numpy / pandas; loops run over ranks,
streams, groups or stream-role pairs, never over events. This stage runs once, in the parent,
after every rank is loaded: each rank's table is read once into integer arrays (frames), keys are
integer codes (strings are built once per distinct value), and the order comparison pairs each
rank with the reference by one sort and one searchsorted, so the cost is linear in ranks ×
events. What depends on one rank alone and costs most (its step ranges) can come precomputed
from the per-rank stage (steps.rank_steps).

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

from collections.abc import Mapping

import pandas as pd

from analyzers.crossrank.clock import _clock_from_metadata, _span_overlap, align_clocks, aligned_copy
from analyzers.crossrank.frames import _build_frames
from analyzers.crossrank.matching import match_collectives
from analyzers.crossrank.order import _MISMATCH_COLUMNS, find_order_mismatches
from analyzers.crossrank.peer_wait import peer_wait, peer_wait_totals
from analyzers.crossrank.report import CrossRankParams, CrossRankReport
from analyzers.crossrank.roles import _attach_roles, _role_labels, match_stream_roles
from analyzers.crossrank.steps import RankSteps
from analyzers.timeline.model import TraceSet

# --------------------------------------------------------------------------- entry points

def analyze_cross_rank(traces: TraceSet, *, align: bool = True, params: CrossRankParams | None = None,
                       steps: Mapping[int, RankSteps] | None = None) -> CrossRankReport:
    """Match collectives, align clocks, measure peer wait and find scheduling-order mismatches.

    steps: per rank, rank_steps(trace, params.step_pattern) of these very traces, when the
    per-rank stage computed it already (in parallel); missing or stale entries are recomputed.
    """
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
    frames.comm = None  # the communication rows: matching is done
    colls, members, arrival, pw_notes = peer_wait(matching, ranks, offsets, params, traces.world_size)
    matching.members = members.iloc[:0]
    notes += pw_notes
    totals, late_rows = peer_wait_totals(traces, colls, members, arrival, offsets, params)
    del arrival
    mism, msum, m_notes = find_order_mismatches(traces, frames, labels, colls, members, offsets, params, steps)
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
        members=members, unmatched=matching.unmatched,
        inconsistent=matching.inconsistent, peer_wait=totals, late_ranks=late_rows, stream_roles=stream_roles,
        mismatches=mism, mismatch_summary=msum, notes=notes, aligned=aligned_copy(traces, offsets))
