"""The analysis of one trace set as data: what `analyze` prints, what the app and diff read."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pandas as pd

from analyzers.crossrank import CrossRankParams, CrossRankReport, RankSteps, analyze_cross_rank, rank_steps
from analyzers.findings import FindingParams, cross_rank_findings, detect_findings, detect_rank
from analyzers.findings.finding import Finding, listed_findings, listed_findings_note, sort_findings
from analyzers.findings.view import windows_of
from analyzers.graph.rank_graph import PackedGraph, build_rank_graph
from analyzers.io.exec_trace import ExecTrace, check_exec_ranks, exec_trace_of
from analyzers.io.parallel import PER_RANK_KEY
from analyzers.io.plain import to_plain
from analyzers.overlap.metrics import AnalysisOptions, RankMetrics, rank_metrics
from analyzers.syncs.blocking import (
    SyncParams,
    blocking_syncs,
    sync_totals_beyond_span,
    syncs_not_judged,
)
from analyzers.syncs.summary import RankSyncSummary, rank_sync_summary, syncs_document
from analyzers.timeline.iterations import check_step_selection, select_step_rows
from analyzers.timeline.model import GPU_STRING_COLUMNS, RankTrace, TraceSet, without_host_tables
from analyzers.timeline.packed import PackedFrame, PackedFrames, packed

if TYPE_CHECKING:
    from analyzers.crossrank.collective_table import CollectiveParams, CollectiveTable
    from analyzers.graph.analysis import GraphRun
    from analyzers.graph.fixes import Fix
    from analyzers.graph.set_graph import SetGraph


def import_caller_stages() -> None:
    """Import what only the calling process runs (the collectives table, the stragglers, the set graph, its
    replays and pricing), apart from what the per-rank stage needs: `analyze` forks its workers with the
    second imported only, and imports these while they parse (load_traces' `meanwhile`), on the core the
    caller would leave idle meanwhile."""
    import analyzers.crossrank.collective_table
    import analyzers.crossrank.stragglers
    import analyzers.graph.analysis
    import analyzers.graph.fixes
    import analyzers.graph.pricing
    import analyzers.graph.set_graph  # noqa: F401



@dataclass
class AnalysisReport:
    label: str
    fmt: str
    world_size: int | None
    sources: list[str]
    ranks: list[RankMetrics]
    notes: list[str] = field(default_factory=list)
    clock_offsets_ns: dict[int, int] = field(default_factory=dict)
    cross_rank: CrossRankReport | None = None  # two ranks or more
    syncs: Mapping[int, pd.DataFrame] = field(default_factory=dict)  # blocking host syncs per rank (PackedFrames)
    findings: list[Finding] | None = None  # None: not diagnosed (--no-diagnose)
    collectives: CollectiveTable | None = None  # sizes, wait / transfer, bandwidth per collective
    extra: dict[str, Any] = field(default_factory=dict)  # further sections (e.g. a run's timings)
    critical_path: dict[str, Any] | None = None  # analyzers.graph: fidelity, critical paths, attribution
    graph_run: GraphRun | None = field(default=None, repr=False, compare=False)  # for `whatif` (not in JSON)
    stragglers: dict[str, Any] | None = None  # crossrank.stragglers.straggler_view (two ranks or more)
    # each rank's part of the `syncs` section, made beside its syncs (the per-rank stage); else made from syncs
    sync_summaries: dict[int, RankSyncSummary] | None = field(default=None, repr=False, compare=False)

    @property
    def diagnosed(self) -> bool:
        return self.findings is not None

    def finding_ids(self) -> list[str]:
        return sorted({f.id for f in self.findings or []})

    def blocking_sync_ns(self) -> int:
        return int(sum(int(df["host_blocked_ns"].sum()) for df in self.syncs.values() if len(df)))

    def rank(self, r: int) -> RankMetrics:
        for m in self.ranks:
            if m.rank == r:
                return m
        raise KeyError(r)

    def ranks_below(self, threshold: float) -> list[RankMetrics]:
        """Ranks whose overlap ratio is defined and below threshold (the CI gate)."""
        return [m for m in self.ranks if m.overlap_ratio is not None and m.overlap_ratio < threshold]

    def to_dict(self) -> dict[str, Any]:
        """The report as plain, JSON-safe Python."""
        return _clean(self.document())

    def document(self) -> dict[str, Any]:
        """What to_dict holds, not yet made plain: ``analyzers.io.plain.to_json`` of it is the JSON of
        to_dict, without the decode and re-encode that cleaning costs (0.04 s for 8 ranks).

        Compact: what grows with ranks x collectives or ranks x iterations (per-rank columns of the
        collectives, per-iteration rows, every blocking sync, the critical path's activities) is left to the
        Parquet tables (overlapscope/write_tables.py), so 1024 ranks stay a document of a few MB."""
        from analyzers.graph.analysis import critical_path_document

        return {
            "label": self.label,
            "format": self.fmt,
            "world_size": self.world_size,
            "sources": self.sources,
            "clock_offsets_ns": {str(k): v for k, v in self.clock_offsets_ns.items()},
            "notes": self.notes + listed_findings_note(self.findings),
            "ranks": [m.to_dict(iterations=False) for m in self.ranks],
            "cross_rank": self.cross_rank.document() if self.cross_rank is not None else None,
            "stragglers": self.stragglers,
            "syncs": syncs_document(self.syncs, self.sync_summaries) if self.diagnosed else None,
            "findings": [f.to_dict() for f in listed_findings(self.findings)] if self.findings is not None else None,
            "collectives": self.collectives.document() if self.collectives is not None else None,
            "critical_path": critical_path_document(self.critical_path),
            **self.extra,
        }


@dataclass(frozen=True)
class RankStage:
    """The per-rank part of `analyze`, run beside the parse (analyzers.io.parallel): picklable, so it
    travels to worker processes and Dask workers.

    send_host_tables=False is for a caller that analyzes with these very options and nothing else
    (`overlapscope analyze`): all it then reads of a rank is the GPU table and these results, so the
    worker keeps the host tables (runtime, host ops, GPU-side sync records) and sends back a third of
    the bytes (7.7 -> 2.4 MB a rank of 54 MB). A step selection needs them in the caller
    (select_step_rows), so they are sent then. The blocking syncs travel and stay packed (PackedFrame).
    """

    options: AnalysisOptions
    diagnose: bool = True
    send_host_tables: bool = True
    graph_only: bool = False  # for graph_run (`whatif`): no metrics, sync notes or findings
    exec_traces: tuple[ExecTrace, ...] = ()  # `whatif --et`: each rank's Execution Trace (exec_trace_of)

    def __call__(self, trace: RankTrace) -> RankResults:
        if self.graph_only:
            res = RankResults(self.options, True, table_fingerprint(trace), None, cross_steps=rank_steps(trace))
            res.syncs = blocking_syncs(trace, None)
            res.graph = PackedGraph(build_rank_graph(trace, res.syncs, FindingParams().step_pattern,
                                                     exec_trace_of(self.exec_traces, trace.rank)))
            res.syncs = PackedFrame(res.syncs)
            return res
        metrics = rank_metrics(trace, self.options)
        res = RankResults(self.options, self.diagnose, table_fingerprint(trace), metrics)
        if self.options.steps.steps is None:  # with a selection the cross-rank stage sees other tables
            res.cross_steps = rank_steps(trace)
        if self.diagnose:
            res.syncs = in_selected_steps(blocking_syncs(trace, None), self.options)
            res.sync_notes = sync_totals_beyond_span(trace, res.syncs)
            params = FindingParams()
            res.windows = windows_of(trace, metrics, params.step_pattern)
            res.findings = detect_rank(trace, metrics, params, None, res.syncs, windows=res.windows)
            if self.options.steps.steps is None:
                res.graph = PackedGraph(build_rank_graph(trace, res.syncs, params.step_pattern))
            res.sync_summary = rank_sync_summary(trace.rank, res.syncs)
            res.syncs = PackedFrame(res.syncs)  # what travels back and stays in the caller, a tenth of the bytes
        return res

    def shipped(self, trace: RankTrace) -> RankTrace:
        """The trace as the caller gets it back, once __call__ has run on it (see send_host_tables); its GPU
        table's string columns (collective name, process group, dtype: mostly empty) as categoricals, one
        byte a row instead of an Arrow string's offset and data (0.5 of 2.2 MB a 54 MB rank), and the table
        packed (timeline/packed.py: 0.16 MB; the cross-rank stage unpacks a few ranks at a time)."""
        if self.send_host_tables or self.options.steps.steps is not None:
            return trace
        return packed(replace(without_host_tables(trace), gpu=categorical_strings(trace.gpu)))


@dataclass
class RankResults:
    """Per-rank results computed next to the parse, with the options they were made for."""

    options: AnalysisOptions
    diagnose: bool
    fingerprint: int  # of the tables they were computed from (see table_fingerprint)
    metrics: RankMetrics | None  # None: made for graph_run only (RankStage.graph_only)
    syncs: PackedFrame | None = None  # the rank's blocking syncs, packed (read through PackedFrames)
    sync_notes: list[str] | None = None  # sync_totals_beyond_span of these syncs
    sync_summary: RankSyncSummary | None = None  # their part of the document's `syncs` section
    findings: list[Finding] | None = None  # with default parameters and no cross-rank start shift
    windows: pd.DataFrame | None = None  # the findings' iteration windows (findings.view.windows_of)
    cross_steps: RankSteps | None = None  # the cross-rank order comparison's steps (default pattern)
    graph: PackedGraph | None = None  # the rank's dependency graph (analyzers.graph), with diagnose, packed


def categorical_strings(gpu: pd.DataFrame) -> pd.DataFrame:
    """The GPU table with its string columns as categoricals (same values, far fewer bytes)."""
    return gpu.assign(**{c: gpu[c].astype("category") for c in GPU_STRING_COLUMNS if c in gpu})


def table_fingerprint(trace: RankTrace) -> int:
    """A checksum of what per-rank results depend on: GPU rows with their categories (RankTrace.gpu_checksum:
    a packed trace keeps the one made when it was packed, so checking results against it unpacks nothing),
    host tables' sizes, the rank."""
    return hash((trace.gpu_checksum(), *trace.host_row_counts(), trace.rank))


def precomputed_results(traces: TraceSet, options: AnalysisOptions, diagnose: bool,
                        metrics: bool = True) -> dict[int, RankResults]:
    """The per-rank results the loader made, when they fit this analysis exactly; else {}.
    metrics=False also takes those made for graph_run only."""
    results: dict[int, RankResults] = traces.meta.get(PER_RANK_KEY) or {}
    ok = {}
    for r, t in traces.ranks.items():
        res = results.get(r)
        if (not isinstance(res, RankResults) or res.options != options or (diagnose and not res.diagnose)
                or (metrics and res.metrics is None) or res.fingerprint != table_fingerprint(t)):
            return {}
        ok[r] = res
    return ok


def _clean(obj: Any) -> Any:
    """JSON-safe: NaN/inf -> None, numpy scalars -> Python, tuples -> lists (one msgspec pass)."""
    return to_plain(obj)


def selected_steps_only(traces: TraceSet, options: AnalysisOptions) -> TraceSet:
    """The trace set as the cross-rank analysis sees it: only the selected steps' GPU activity."""
    if options.steps.steps is None:
        return traces
    return replace(traces, ranks={r: select_step_rows(t, options.steps, options.step_pattern)
                                  for r, t in traces.ranks.items()})


def in_selected_steps(syncs: pd.DataFrame, options: AnalysisOptions) -> pd.DataFrame:
    """The blocking syncs called inside the selected steps (all of them when none are selected)."""
    if options.steps.steps is None or syncs.empty:
        return syncs
    return syncs[options.steps.mask(syncs["step"].to_numpy())].reset_index(drop=True)


def analyze(traces: TraceSet, options: AnalysisOptions | None = None, *,
            diagnose: bool = True, cross_rank: bool = True, align: bool = True,
            cross_rank_params: CrossRankParams | None = None, finding_params: FindingParams | None = None,
            sync_params: SyncParams | None = None, collective_params: CollectiveParams | None = None,
            progress: Callable[[str, int, int], None] | None = None) -> AnalysisReport:
    """The one place every analysis runs, so the CLI, diff, sweep and the app agree.

    Per-rank metrics always; with two ranks or more the cross-rank analysis (collective
    matching, clock alignment unless align=False, peer wait, order mismatches); with
    diagnose, blocking host syncs and the findings engine (cross-rank findings included).
    progress(stage, done, total) reports each stage.
    """
    from analyzers.crossrank.collective_table import collective_table
    from analyzers.crossrank.stragglers import straggler_view

    options = options or AnalysisOptions()
    check_step_selection(traces, options.steps, options.step_pattern)
    ids = traces.rank_ids()
    stages = 1 + int(cross_rank and len(ids) > 1) + int(diagnose)
    done = 0

    def tick(stage: str) -> None:
        nonlocal done
        done += 1
        if progress:
            progress(stage, done, stages)

    pre = precomputed_results(traces, options, diagnose)
    metrics = [pre[r].metrics if pre else rank_metrics(traces.ranks[r], options) for r in ids]
    tick("metrics")
    report = AnalysisReport(
        label=traces.label,
        fmt=traces.fmt,
        world_size=traces.world_size,
        sources=traces.sources,
        ranks=metrics,
        notes=list(traces.notes),
        clock_offsets_ns=dict(traces.clock_offsets_ns),
    )
    selected = selected_steps_only(traces, options)
    if cross_rank and len(ids) > 1:
        steps = {r: pre[r].cross_steps for r in ids} if pre and options.steps.steps is None else None
        report.cross_rank = analyze_cross_rank(selected, align=align, params=cross_rank_params,
                                               steps=steps if steps and None not in steps.values() else None)
        report.stragglers = straggler_view(selected.ranks, report.cross_rank.collectives, report.cross_rank.members)
        if report.cross_rank.clock is not None:
            report.clock_offsets_ns = dict(report.cross_rank.clock.offsets_ns)
        tick("cross-rank")
    # the cross-rank members index the selected steps' GPU rows: the table reads the same rows
    report.collectives = collective_table(selected, report.cross_rank, collective_params)
    if diagnose:
        defaults = bool(pre) and sync_params is None and finding_params is None
        report.syncs = PackedFrames({r: pre[r].syncs if defaults else
                                     in_selected_steps(blocking_syncs(traces.ranks[r], sync_params), options)
                                     for r in ids})
        if defaults:
            report.sync_summaries = {r: pre[r].sync_summary for r in ids if pre[r].sync_summary is not None}
        for r in ids:
            beyond = pre[r].sync_notes if defaults else None
            report.notes += beyond if beyond is not None else sync_totals_beyond_span(traces.ranks[r], report.syncs[r])
            if reason := syncs_not_judged(traces.ranks[r]):
                report.notes.append(f"rank {r}: {reason}")
        extra = cross_rank_findings(report.cross_rank) if report.cross_rank is not None else []
        report.findings = detect_findings(traces, {m.rank: m for m in metrics}, finding_params,
                                          extra=extra, syncs=report.syncs,
                                          precomputed={r: pre[r].findings for r in ids} if defaults else None,
                                          windows={r: pre[r].windows for r in ids} if defaults else None)
        if options.steps.steps is None:
            _price(report, traces, pre if defaults else None, (finding_params or FindingParams()).step_pattern)
        else:
            report.notes.append("critical path and findings' savings: computed on all steps only (no --steps)")
        tick("findings")
    return report


def _price(report: AnalysisReport, traces: TraceSet, pre: dict[int, RankResults] | None, pattern: str) -> None:
    """The dependency graph's answers: critical path section, and each finding's saving (re-sorted)."""
    from analyzers.graph.fixes import FIX_OF_FINDING
    from analyzers.graph.pricing import priced_run

    sg = _set_graph(traces, report.syncs, report.cross_rank, report.clock_offsets_ns, pre, pattern)
    report.graph_run, report.critical_path, savings = priced_run(sg, report.finding_ids())
    for f in report.findings or []:
        got = savings.get(FIX_OF_FINDING.get(f.id, ""))
        if got is not None:
            f.saving_ns, f.saving_fraction, f.saving_fix = got["saving_ns"], got["saving_fraction"], got["fix"]
    report.findings = sort_findings(report.findings or [])


def _set_graph(traces: TraceSet, syncs: Mapping[int, pd.DataFrame], cr: CrossRankReport | None,
               offsets: dict[int, int], pre: dict[int, RankResults] | None, pattern: str,
               exec_traces: tuple[ExecTrace, ...] = ()) -> SetGraph:
    """Every rank's graph (from the per-rank stage where it made them, else built here) in one set graph."""
    from analyzers.graph.set_graph import build_set_graph

    ids = traces.rank_ids()
    if pre:
        graphs = {r: pre[r].graph for r in ids if pre[r].graph is not None}
    else:
        graphs = {r: PackedGraph(build_rank_graph(traces.ranks[r], syncs[r], pattern, exec_trace_of(exec_traces, r)))
                  for r in ids}  # packed as built: the set graph unpacks one at a time
    return build_set_graph(graphs, offsets, cr.members if cr is not None else None,
                           cr.collectives if cr is not None else None)


def _graph_run(traces: TraceSet, syncs: Mapping[int, pd.DataFrame], cr: CrossRankReport | None,
               offsets: dict[int, int], pre: dict[int, RankResults] | None, pattern: str,
               exec_traces: tuple[ExecTrace, ...] = (), fixes: Sequence[Fix] = ()) -> GraphRun:
    """The set graph's run; fixes: `whatif`'s, replayed beside the unmodified replay (pricing.whatif_run)."""
    from analyzers.graph.analysis import GraphRun
    from analyzers.graph.pricing import whatif_run

    sg = _set_graph(traces, syncs, cr, offsets, pre, pattern, exec_traces)
    return whatif_run(sg, list(fixes)) if fixes else GraphRun(sg)


def graph_run(traces: TraceSet, options: AnalysisOptions | None = None,
              exec_traces: tuple[ExecTrace, ...] = (), fixes: Sequence[Fix] = ()) -> GraphRun:
    """The set's dependency graph and its unmodified replay, as `analyze` (all steps) makes them, without
    the sections `whatif` does not read (collectives table, stragglers, findings, critical path,
    savings): the same graph, so the same predictions. fixes: those `whatif` asks, replayed beside the
    unmodified replay where a second core can take them (the run keeps their replay for analysis.whatif)."""
    options = options or AnalysisOptions()
    if options.steps.steps is not None:
        raise ValueError("graph_run: the graph covers all steps (no step selection)")
    ids = traces.rank_ids()
    pre = precomputed_results(traces, options, True, metrics=False)
    offsets, cr = dict(traces.clock_offsets_ns), None
    if len(ids) > 1:
        steps = {r: pre[r].cross_steps for r in ids} if pre else None
        cr = analyze_cross_rank(traces, steps=steps if steps and None not in steps.values() else None)
        if cr.clock is not None:
            offsets = dict(cr.clock.offsets_ns)
    syncs = PackedFrames({r: pre[r].syncs if pre else blocking_syncs(traces.ranks[r], None) for r in ids})
    check_exec_ranks(exec_traces, ids)
    return _graph_run(traces, syncs, cr, offsets, pre or None,
                      FindingParams().step_pattern, exec_traces, fixes)
