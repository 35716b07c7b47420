"""The findings engine: runs every registered detector on a trace set and merges the findings.

Which findings exist and in which order they run is decided in registry.py; this module only
drives them (per rank, then the cross-rank ones passed in through ``extra``).
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pandas as pd

from analyzers.crossrank import CrossRankReport
from analyzers.findings.comm_slowed_by_overlap import transfer_starts
from analyzers.findings.finding import CATALOGUE, Finding, sort_findings
from analyzers.findings.registry import CROSS_RANK_FINDINGS, RANK_FINDINGS, START_SHIFT_FINDINGS, FindingParams
from analyzers.findings.view import RankContext, RankView, windows_of
from analyzers.overlap.metrics import RankMetrics
from analyzers.syncs.blocking import SyncParams, blocking_syncs, empty_syncs
from analyzers.timeline.model import RankTrace, TraceSet


def detect_rank(trace: RankTrace, metrics: RankMetrics | None = None, params: FindingParams | None = None,
                eff_start: np.ndarray | None = None, syncs: pd.DataFrame | None = None,
                detectors: tuple[ModuleType, ...] = RANK_FINDINGS, windows: pd.DataFrame | None = None
                ) -> list[Finding]:
    """Every per-rank detector (or those given) on one rank, in registry order; windows: windows_of
    of this trace, metrics and params.step_pattern, when already made (by the per-rank stage)."""
    params = params or FindingParams()
    view = RankView(trace, params, windows if windows is not None else windows_of(trace, metrics, params.step_pattern))
    if trace.gpu.empty or view.windows.empty:
        return []
    syncs = blocking_syncs(trace, params.sync) if syncs is None else syncs
    context = RankContext(syncs=syncs, eff_start=eff_start)
    out: list[Finding] = []
    for finding in detectors:
        out += finding.detect(view, context)
    return out


def with_start_shift(precomputed: list[Finding], shifted: list[Finding]) -> list[Finding]:
    """A rank's findings once collectives are measured from the last arrival: those made beside the
    parse, with the start-shift detectors' findings replaced by their new ones (shifted), in the
    order detect_rank lists them (registry order; each detector's own order kept)."""
    redone = {finding.ENTRY.id for finding in START_SHIFT_FINDINGS}
    order = {finding.ENTRY.id: i for i, finding in enumerate(RANK_FINDINGS)}
    kept = [f for f in precomputed if f.id not in redone]
    return sorted(kept + shifted, key=lambda f: order.get(f.id, len(order)))


def cross_rank_findings(report: CrossRankReport) -> list[Finding]:
    """late-peer and cross-rank-order-mismatch findings from a cross-rank report (registry order)."""
    out: list[Finding] = []
    for finding in CROSS_RANK_FINDINGS:
        out += finding.detect_cross_rank(report)
    return out


def detect_findings(traces: TraceSet, metrics: dict[int, RankMetrics] | None = None,
                    params: FindingParams | None = None, extra: list[Finding] | None = None,
                    syncs: dict[int, pd.DataFrame] | None = None,
                    precomputed: dict[int, list[Finding] | None] | None = None,
                    windows: dict[int, pd.DataFrame | None] | None = None) -> list[Finding]:
    """All findings of a trace set, most severe first.

    metrics: the RankMetrics `analyze` computed (their iteration windows honour --steps);
    extra: findings from other analyses (crossrank: late-peer, cross-rank-order-mismatch);
    syncs: blocking_syncs per rank when already computed (saves recomputing them);
    precomputed: per-rank findings made beside the parse (analyzers.report.RankStage) with no start
    shift: used as they are when no collective moved a rank's starts, else all but those of the
    detectors that read the shift (registry.START_SHIFT_FINDINGS), which run again here, in the
    windows made beside them (windows): a rank's host tables need not be here for that.
    """
    params = params or FindingParams()
    eff = transfer_starts(traces, params)
    # the clocks were shared and collectives matched when some rank's starts moved to an arrival
    matched = any(not np.array_equal(eff[r], traces.ranks[r].gpu["start_ns"].to_numpy()) for r in eff)
    out: list[Finding] = []
    for r in traces.rank_ids():
        t, made = traces.ranks[r], (precomputed or {}).get(r)
        if made is not None and not matched:
            out += made
        elif made is not None:  # only the detectors that read the shift run again (serially, here)
            out += with_start_shift(made, detect_rank(t, (metrics or {}).get(r), params, eff[r], (syncs or {}).get(r),
                                                      START_SHIFT_FINDINGS, (windows or {}).get(r)))
        else:
            out += detect_rank(t, (metrics or {}).get(r), params, eff[r] if matched else None,
                               (syncs or {}).get(r))
    out += list(extra or [])
    return sort_findings(out)


def trace_set_syncs(traces: TraceSet, params: SyncParams | None = None) -> pd.DataFrame:
    """blocking_syncs of every rank in one frame (rank column first)."""
    frames = [blocking_syncs(traces.ranks[r], params) for r in traces.rank_ids()]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else empty_syncs()


def findings_present(findings: list[Finding], ids: list[str]) -> list[str]:
    """The ids among `ids` that some finding has (for --fail-on); unknown ids raise ValueError."""
    unknown = [i for i in ids if i not in CATALOGUE]
    if unknown:
        raise ValueError(f"unknown finding id(s): {', '.join(unknown)} (known: {', '.join(CATALOGUE)})")
    have = {f.id for f in findings}
    return [i for i in ids if i in have]
