"""launch-bound-gaps: GPU idle because the next kernel was launched only after the previous one ended."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzers.findings.finding import CatalogueEntry, Finding
from analyzers.findings.host_blocking_sync import charged_idle
from analyzers.findings.view import (
    RankContext,
    RankView,
    fmt_ms,
    fmt_us,
    per_name,
    per_name_numbered,
    plain,
    severity_of,
)
from analyzers.syncs.blocking import blocking_syncs
from analyzers.timeline import intervals as iv
from analyzers.timeline.constants import NO_TIME
from analyzers.timeline.graphs import graph_launch_of
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


@dataclass
class _Gaps:
    """Launch-bound gaps of one device as arrays; next: the GPU row that ends each gap."""

    device: int
    start_ns: np.ndarray
    end_ns: np.ndarray
    next_launch_ns: np.ndarray
    next: np.ndarray

    @property
    def gap_ns(self) -> np.ndarray:
        return self.end_ns - self.start_ns


def _launch_gaps(view: RankView, syncs: pd.DataFrame | None) -> list[_Gaps]:
    """launch_bound_gaps per device, without frames (devices with no gap of the minimum length
    left out)."""
    p, t = view.params, view.trace
    launch = launch_times(t)
    lo, hi = view.lo, view.hi
    syncs = blocking_syncs(t, p.sync) if syncs is None else syncs
    # inside an analysed window (steps not selected leave holes between windows)
    w_lo = view.windows["lo"].to_numpy(np.int64)
    by_lo = np.argsort(w_lo, kind="stable")
    wl, wh = w_lo[by_lo], view.windows["hi"].to_numpy(np.int64)[by_lo]
    # syncs that caused GPU idle (as host-blocking-sync counts it) end inside a gap: host-blocking-sync owns it
    claimed = (charged_idle(syncs) >= p.sync_min_idle_ns) if not syncs.empty else np.zeros(0, dtype=bool)
    sync_dev = syncs["device"].to_numpy()[claimed] if not syncs.empty else claimed
    sync_end = syncs["end_ns"].to_numpy(np.int64)[claimed] if not syncs.empty else np.zeros(0, dtype=np.int64)
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
        order = np.lexsort((np.where(launch[idx] != NO_TIME, launch[idx], np.iinfo(np.int64).max), starts))
        starts_o, idx_o = starts[order], idx[order]
        j = np.searchsorted(starts_o, ge, side="left")
        nxt = idx_o[np.clip(j, 0, idx_o.size - 1)]
        nl = launch[nxt]
        bound = (nl != NO_TIME) & (nl >= gs)
        k = np.searchsorted(wl, gs, side="right") - 1
        bound &= (k >= 0) & (ge <= wh[np.clip(k, 0, wl.size - 1)])
        if not syncs.empty:
            se = np.sort(sync_end[sync_dev == d])
            has_sync = np.searchsorted(se, ge, side="right") > np.searchsorted(se, gs, side="left")
            bound &= ~has_sync
        parts.append(_Gaps(d, gs[bound], ge[bound], nl[bound], nxt[bound]))
    return parts


def launch_bound_gaps(view: RankView, syncs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Idle gaps (per device) whose next activity was launched only after the gap began.

    Gaps during which a blocking host sync that caused GPU idle returned are left out:
    host-blocking-sync owns them. A sync that found the GPU already drained claimed nothing
    (syncs.blocking_syncs charges it no idle): the gap after it stays a launch gap; so does the gap
    after a sync that held the host less than sync_min_idle_ns (host_blocking_sync.charged_idle:
    the host's delay after it returned made that gap, not the sync).
    A CUDA-graph replay is one launch (timeline.graphs): its kernels all carry the graph launch's time,
    so a gap between two of them is never launch-bound; a gap before a replay names it
    ("graph replay: <its first kernel>"; next_graph_launch: the launch's correlation id, -1 for none).
    Columns: device, start_ns, end_ns, gap_ns, next_launch_ns, next_name, next_graph_launch.
    """
    cols = ["device", "start_ns", "end_ns", "gap_ns", "next_launch_ns", "next_name", "next_graph_launch"]
    graph = graph_launch_of(view.trace)
    parts = [pd.DataFrame({"device": g.device, "start_ns": g.start_ns, "end_ns": g.end_ns, "gap_ns": g.gap_ns,
                           "next_launch_ns": g.next_launch_ns,
                           "next_name": _next_names(view, g.next, graph),
                           "next_graph_launch": graph[g.next]})
             for g in _launch_gaps(view, syncs)]
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
    parts = _launch_gaps(view, syncs)
    start, end = (np.concatenate([getattr(g, c) for g in parts]) if parts else np.zeros(0, dtype=np.int64)
                  for c in ("start_ns", "end_ns"))
    n, span = start.size, view.span_ns()
    total = int((end - start).sum()) if n else 0
    if n < p.launch_min_gaps or span <= 0 or total < p.launch_min_share * span:
        return []
    # What the gaps frame would give (same sorts on the same values), without building it.
    gap_ns = pd.Series(end - start)
    biggest = gap_ns.sort_values(ascending=False).head(5).index.to_numpy()
    code, names = per_name_numbered(view, np.concatenate([g.next for g in parts]), normalize_kernel_name)
    per_kernel = pd.DataFrame({"size": np.bincount(code, minlength=len(names)).astype(np.int64),
                               "sum": _sum_by(code, gap_ns.to_numpy(), len(names))}, index=names)
    nxt = per_kernel.sort_values("sum", ascending=False).head(5)
    evidence = {
        "n_gaps": int(n),
        "gap_ns_total": total,
        "gap_ns_median": float(gap_ns.median()),
        "share_of_span": total / span,
        "largest": [{"start_ns": int(start[i]), "gap_ns": int(gap_ns.iloc[i]), "next": str(names[code[i]])}
                    for i in biggest],
        "next_kernels": [{"name": str(k), "n": int(r["size"]), "gap_ns": int(r["sum"])}
                         for k, r in nxt.iterrows()],
    }
    title = f"rank {t.rank}: {n} launch-bound GPU gaps, {fmt_ms(total)} idle ({total / span:.0%} of the span)"
    explanation = (
        f"In {n} gaps of at least {fmt_us(p.launch_min_gap_ns)} "
        f"(median {fmt_us(evidence['gap_ns_median'])}) the "
        f"host launched the next kernel only after the previous one had finished: the GPU ran out of queued work "
        f"and waited for the CPU. Communication cannot hide behind compute that is not there yet."
    )
    return [Finding(id="launch-bound-gaps", severity=severity_of(total, span, p), ranks=[t.rank], title=title,
                    explanation=explanation, start_ns=int(start.min()), end_ns=int(end.max()),
                    evidence=plain(evidence))]


def _next_names(view: RankView, rows: np.ndarray, graph: np.ndarray) -> np.ndarray:
    """Normalized names of the rows that end gaps; a graph replay's first kernel as "graph replay: <name>"."""
    names = per_name(view, rows, normalize_kernel_name)
    replay = graph[rows] >= 0
    if replay.any():
        names = names.copy()
        names[replay] = ["graph replay: " + str(n) for n in names[replay]]
    return names


def _sum_by(code: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """int64 sum of values per code 0..n-1 (exact, unlike a float bincount)."""
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, code, values)
    return out


def detect(view: RankView, context: RankContext) -> list[Finding]:
    """The registry's entry point: detect_launch_bound with what it needs from the rank's context."""
    return detect_launch_bound(view, context.syncs)
