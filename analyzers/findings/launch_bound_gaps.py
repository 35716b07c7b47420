"""launch-bound-gaps: GPU idle because the next kernel was launched only after the previous one ended."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzers.findings.finding import CatalogueEntry, Finding
from analyzers.findings.view import (
    RankContext,
    RankView,
    fmt_ms,
    fmt_us,
    per_name,
    plain,
    severity_of,
)
from analyzers.syncs.blocking import blocking_syncs
from analyzers.timeline import intervals as iv
from analyzers.timeline.iterations import launch_times
from analyzers.timeline.kernel_names import normalize_kernel_name


@dataclass(frozen=True)
class Params:
    """Thresholds of launch-bound-gaps (fields of FindingParams)."""

    launch_min_gap_ns: int = 10_000
    """An idle gap counts when at least this long (10 µs: several launch latencies)."""
    launch_min_gaps: int = 3
    """At least this many launch-bound gaps (one slow launch is not a pattern)."""
    launch_min_share: float = 0.05
    """Their total must be at least this share of the analysed GPU span."""


ENTRY = CatalogueEntry(
    id='launch-bound-gaps',
    detects='GPU idle gaps where the next kernel was launched after the previous one ended',
    fix='larger chunks, CUDA graphs, fewer launches',
    summary='GPU idle gaps where the next kernel was launched after the previous one ended',
    summary_fix='larger chunks, CUDA graphs, fewer launches',
    look_alikes=('gaps whose next kernel was already queued (a dependency, not the host), short or few'
                    ' gaps, gaps a host sync explains, traces without launch records or without '
                    'communication'),
)


def launch_bound_gaps(view: RankView, syncs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Idle gaps (per device) whose next activity was launched only after the gap began.

    Gaps during which a blocking host sync that caused GPU idle returned are left out:
    host-blocking-sync owns them. A sync that found the GPU already drained claimed nothing
    (syncs.blocking_syncs charges it no idle): the gap after it stays a launch gap.
    Columns: device, start_ns, end_ns, gap_ns, next_launch_ns, next_name.
    """
    p, t = view.params, view.trace
    cols = ["device", "start_ns", "end_ns", "gap_ns", "next_launch_ns", "next_name"]
    launch = launch_times(t)
    lo, hi = view.lo, view.hi
    syncs = blocking_syncs(t, p.sync) if syncs is None else syncs
    parts = []
    for d in view.devices():
        on = (view.device == d) & view.in_range(lo, hi) & (view.e > view.s)
        gs, ge = iv.gaps(view.s[on], view.e[on])
        big = (ge - gs) >= p.launch_min_gap_ns
        gs, ge = gs[big], ge[big]
        if gs.size == 0:
            continue
        # the activities that end each gap: those starting exactly at its end; earliest launch wins
        idx = np.flatnonzero(on)
        starts = view.s[idx]
        order = np.lexsort((np.where(launch[idx] >= 0, launch[idx], np.iinfo(np.int64).max), starts))
        starts_o, idx_o = starts[order], idx[order]
        j = np.searchsorted(starts_o, ge, side="left")
        nxt = idx_o[np.clip(j, 0, idx_o.size - 1)]
        nl = launch[nxt]
        bound = (nl >= 0) & (nl >= gs)
        # inside an analysed window (steps not selected leave holes between windows)
        wl = np.sort(view.windows["lo"].to_numpy(np.int64))
        wh = view.windows["hi"].to_numpy(np.int64)[np.argsort(view.windows["lo"].to_numpy(np.int64), kind="stable")]
        k = np.searchsorted(wl, gs, side="right") - 1
        bound &= (k >= 0) & (ge <= wh[np.clip(k, 0, wl.size - 1)])
        if not syncs.empty:
            claimed = (syncs["device"] == d) & (syncs["gpu_idle_ns"] > 0)
            se = np.sort(syncs.loc[claimed, "end_ns"].to_numpy(np.int64))
            has_sync = np.searchsorted(se, ge, side="right") > np.searchsorted(se, gs, side="left")
            bound &= ~has_sync
        parts.append(pd.DataFrame({"device": d, "start_ns": gs[bound], "end_ns": ge[bound],
                                   "gap_ns": (ge - gs)[bound], "next_launch_ns": nl[bound],
                                   "next_name": per_name(view, nxt[bound], normalize_kernel_name)}))
    if not parts:
        return pd.DataFrame({c: [] for c in cols})
    return pd.concat(parts, ignore_index=True)[cols]


def detect_launch_bound(view: RankView, syncs: pd.DataFrame | None = None) -> list[Finding]:
    """GPU idle gaps where the next kernel was launched only after the previous one ended.

    Silent on: gaps whose next kernel was already queued (the GPU waited on a dependency, not on
    the host), short gaps, few gaps, gaps a host sync explains, traces without launch records.
    """
    p, t = view.params, view.trace
    if not view.comm.any():
        return []  # no communication: no overlap for the gaps to cost
    gaps = launch_bound_gaps(view, syncs)
    span = view.span_ns()
    total = int(gaps["gap_ns"].sum()) if not gaps.empty else 0
    if len(gaps) < p.launch_min_gaps or span <= 0 or total < p.launch_min_share * span:
        return []
    biggest = gaps.sort_values("gap_ns", ascending=False).head(5)
    nxt = gaps.groupby("next_name")["gap_ns"].agg(["size", "sum"]).sort_values("sum", ascending=False).head(5)
    evidence = {
        "n_gaps": int(len(gaps)),
        "gap_ns_total": total,
        "gap_ns_median": float(gaps["gap_ns"].median()),
        "share_of_span": total / span,
        "largest": [{"start_ns": int(r.start_ns), "gap_ns": int(r.gap_ns), "next": str(r.next_name)}
                    for r in biggest.itertuples(index=False)],
        "next_kernels": [{"name": str(n), "n": int(r["size"]), "gap_ns": int(r["sum"])}
                         for n, r in nxt.iterrows()],
    }
    title = f"rank {t.rank}: {len(gaps)} launch-bound GPU gaps, {fmt_ms(total)} idle ({total / span:.0%} of the span)"
    explanation = (
        f"In {len(gaps)} gaps of at least {fmt_us(p.launch_min_gap_ns)} "
        f"(median {fmt_us(evidence['gap_ns_median'])}) the "
        f"host launched the next kernel only after the previous one had finished: the GPU ran out of queued work "
        f"and waited for the CPU. Communication cannot hide behind compute that is not there yet."
    )
    return [Finding(id="launch-bound-gaps", severity=severity_of(total, span, p), ranks=[t.rank], title=title,
                    explanation=explanation, start_ns=int(gaps["start_ns"].min()), end_ns=int(gaps["end_ns"].max()),
                    evidence=plain(evidence))]


def detect(view: RankView, context: RankContext) -> list[Finding]:
    """The registry's entry point: detect_launch_bound with what it needs from the rank's context."""
    return detect_launch_bound(view, context.syncs)
