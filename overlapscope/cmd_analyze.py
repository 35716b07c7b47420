"""`overlapscope analyze PATH...`: overlap metrics, cross-rank analysis and findings of one trace set."""

from __future__ import annotations

from typing import Annotated

import typer

from analyzers.findings import findings_present
from analyzers.findings.finding import CATALOGUE
from analyzers.report import analyze
from analyzers.timeline.iterations import DEFAULT_STEP_PATTERN

from . import render
from .common import (
    EXIT_GATE,
    CommKernelOpt,
    FormatOpt,
    JobsOpt,
    LikeHtaOpt,
    NoCacheOpt,
    OutputFormat,
    PathsArg,
    RulesOpt,
    SchedulerOpt,
    StepPatternOpt,
    StepsOpt,
    UsageFailure,
    emit,
    err_console,
    gate_threshold,
    load_set,
    options_from,
    stage_progress,
)


def analyze_cmd(
    paths: PathsArg,
    format: FormatOpt = OutputFormat.table,
    steps: StepsOpt = None,
    rules: RulesOpt = None,
    comm_kernel: CommKernelOpt = None,
    like_hta: LikeHtaOpt = False,
    step_pattern: StepPatternOpt = DEFAULT_STEP_PATTERN,
    rank: Annotated[int | None, typer.Option(
        "--rank", help="Rank of a single trace file that names none (no distributedInfo, no rankN in its name).")
    ] = None,
    streams: Annotated[bool, typer.Option("--streams", help="Also print per-stream busy time (table format).")
                       ] = False,
    no_align: Annotated[bool, typer.Option(
        "--no-align", help="Do not align rank clocks (cross-rank analysis uses the clocks as recorded).")] = False,
    no_diagnose: Annotated[bool, typer.Option(
        "--no-diagnose", help="Metrics only: skip blocking-sync analysis and findings.")] = False,
    fail_on: Annotated[list[str] | None, typer.Option(
        "--fail-on", metavar="FINDING",
        help="Exit 1 when this finding is present (repeatable), e.g. --fail-on host-blocking-sync. "
             "Ids: " + ", ".join(CATALOGUE) + ".")] = None,
    fail_under_overlap: Annotated[float | None, typer.Option(
        "--fail-under-overlap", metavar="R",
        help="Exit 1 when any rank's overlap ratio is below R (0.8 or 80 both mean 80 %). "
             "Ranks without communication do not fail the gate.")] = None,
    jobs: JobsOpt = None,
    no_cache: NoCacheOpt = False,
    scheduler: SchedulerOpt = None,
) -> None:
    """Measure comm/compute overlap per rank, stream and iteration."""
    options = options_from(steps, like_hta, step_pattern)
    threshold = gate_threshold(fail_under_overlap) if fail_under_overlap is not None else None
    fail_ids = check_finding_ids(fail_on or [], no_diagnose)
    traces = load_set(paths, rank=rank, rules=rules, comm_kernel=comm_kernel, jobs=jobs, cache=not no_cache,
                      scheduler=scheduler, options=options, diagnose=not no_diagnose)
    with stage_progress(err_console.is_terminal) as progress:
        report = analyze(traces, options, diagnose=not no_diagnose, align=not no_align, progress=progress)
    emit(report, format, streams=streams)
    failed = False
    if threshold is not None:
        failing = report.ranks_below(threshold)
        if failing:
            detail = ", ".join(f"rank {m.rank} {render.pct(m.overlap_ratio)}" for m in failing)
            err_console.print(f"[red]gate failed:[/red] overlap ratio below {render.pct(threshold)}: {detail}")
            failed = True
    present = findings_present(report.findings or [], fail_ids)
    if present:
        err_console.print(f"[red]gate failed:[/red] finding(s) present: {', '.join(present)}")
        failed = True
    if failed:
        raise typer.Exit(EXIT_GATE)


def check_finding_ids(ids: list[str], no_diagnose: bool) -> list[str]:
    """--fail-on ids must be known finding ids, and need the diagnosis."""
    unknown = [i for i in ids if i not in CATALOGUE]
    if unknown:
        raise UsageFailure(f"--fail-on: unknown finding {', '.join(unknown)} (known: {', '.join(CATALOGUE)})")
    if ids and no_diagnose:
        raise UsageFailure("--fail-on needs the findings: drop --no-diagnose")
    return ids
