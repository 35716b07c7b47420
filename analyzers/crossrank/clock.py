"""Clock alignment: per-rank offsets from trace metadata or from matched collectives' ends."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from analyzers.crossrank.frames import _search
from analyzers.crossrank.matching import _Matching
from analyzers.crossrank.report import _TIME_COLUMNS, ClockAlignment, CrossRankParams
from analyzers.timeline.model import RankTrace, TraceSet

# --------------------------------------------------------------------------- clock alignment


def _ms(ns: float | int | None) -> str:
    """A clock difference in the words every report uses: ms (n/a when unknown)."""
    return "n/a" if ns is None else f"{ns / 1e6:.3f} ms"

def _reference_mask(colls: pd.DataFrame, params: CrossRankParams) -> np.ndarray:
    """Collectives whose ends should coincide on all ranks (per collective id)."""
    return _search(colls["coll_name"], params.clock_reference_pattern)


def _end_matrix(members: pd.DataFrame, ranks: list[int], ids: np.ndarray) -> np.ndarray:
    """collective × rank matrix of ends, relative to the earliest end, as float (NaN where a rank is
    absent): epoch nanoseconds would lose ~100 ns in a float64, ends relative to the earliest do not.
    Rows: the collectives of ids that have members, in id order; columns: ranks."""
    cid = members["coll_id"].to_numpy(dtype=np.int64)
    sel = np.isin(cid, ids)
    cid, end = cid[sel], members["end"].to_numpy(dtype=np.int64)[sel]
    rows, row_of = np.unique(cid, return_inverse=True)
    col_of = np.searchsorted(np.asarray(ranks, dtype=np.int64), members["rank"].to_numpy(dtype=np.int64)[sel])
    mat = np.full((len(rows), len(ranks)), np.nan)
    if len(end):
        mat[row_of, col_of] = (end - end.min()).astype(np.float64)
    return mat


def estimate_offsets(ends: np.ndarray, ranks: list[int]) -> tuple[dict[int, int], list[int]]:
    """offset_r = median(end_ref - end_r) over collectives both run (ends: _end_matrix, columns in
    ranks order); ranks that share none with the reference are reached through other ranks.
    Returns offsets and unreachable ranks."""
    ref = ranks[0]
    col = {r: i for i, r in enumerate(ranks)}
    present = ~np.isnan(ends)
    offsets = {ref: 0}
    pending = [r for r in ranks[1:]]
    progress = True
    while pending and progress:
        progress = False
        for r in list(pending):
            for s in list(offsets):
                both = present[:, col[s]] & present[:, col[r]]
                if both.any():
                    d = ends[both, col[s]].astype(np.int64) - ends[both, col[r]].astype(np.int64)
                    offsets[r] = offsets[s] + int(np.rint(np.median(d)))
                    pending.remove(r)
                    progress = True
                    break
    for r in pending:
        offsets[r] = 0
    return {r: offsets[r] for r in ranks}, pending


def _skew(ends: np.ndarray, ranks: list[int], offsets: dict[int, int]) -> tuple[int | None, int | None]:
    """Median and max over collectives of (last aligned end - first aligned end)."""
    if not ends.size:
        return None, None
    two = (~np.isnan(ends)).sum(axis=1) >= 2
    if not two.any():
        return None, None
    shifted = ends[two] + np.array([offsets.get(r, np.nan) for r in ranks], dtype=float)[None, :]
    spread = np.nanmax(shifted, axis=1) - np.nanmin(shifted, axis=1)
    spread = spread[~np.isnan(spread)]
    if not len(spread):
        return None, None
    return int(np.rint(np.median(spread))), int(spread.max())


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
    before_med, _ = _skew(ends, ranks, zero)
    tol = params.shared_clock_tolerance_ns
    ends_agree = before_med is not None and before_med <= tol

    hosts = {t.hostname for t in traces}
    known = _clock_from_metadata(traces)
    if known is not None:
        shared, method, reason = known
    elif session is not None:
        shared, method = False, "session-start"
        est_res, _ = _skew(ends, ranks, estimated)
        reason = ("one host, separate nsys sessions: offsets from the sessions' start times; matched collective "
                  f"ends leave {_ms(_skew(ends, ranks, session)[0])} (median) with them and {_ms(est_res)} with their "
                  "own best offsets")
    else:
        overlap = _span_overlap(traces)
        why = "host unknown" if "" in hosts else "one host, but separate profiling sessions"
        if overlap >= params.min_span_overlap and ends_agree:
            shared, method = True, "verified-by-collective-ends"
            reason = (f"{why}; GPU time ranges overlap {overlap:.0%} and matched collective ends differ by "
                      f"{_ms(before_med)} (median) without any offset")
        else:
            shared, method = False, "matched-collective-ends"
            reason = (f"{why}; GPU time ranges overlap {overlap:.0%}, matched collective ends differ by "
                      f"{_ms(before_med)} (median) as recorded")
    if shared and not ends_agree and before_med is not None:
        notes.append(f"the ranks share a clock ({method}) but matched collective ends differ by {_ms(before_med)} "
                     "(median): the order-matched collectives may not be the same ones")
    offsets = zero if shared else (session if method == "session-start" else estimated)
    est_med, _ = _skew(ends, ranks, estimated)
    trusted = shared or method == "session-start" or (est_med is not None
                                                       and est_med <= params.max_alignment_residual_ns)
    if not trusted:
        notes.append(f"clock offsets not applied: even the best offsets leave matched collective ends "
                     f"{_ms(est_med)} apart (median), so these collectives do not pin the clocks down")
        offsets, method = zero, "none"
    if not align:
        if not shared and any(estimated.values()):
            notes.append("clocks not aligned (--no-align): the matched collective ends suggest offsets "
                         + ", ".join(f"rank {r}: {_ms(v)}" for r, v in estimated.items() if r != ref))
        offsets, method = zero, "disabled"
    res_med, res_max = _skew(ends, ranks, offsets)
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
