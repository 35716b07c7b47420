"""`overlapscope analyze PATH...`: overlap metrics, cross-rank analysis and findings of one trace set."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from analyzers.findings import findings_present
from analyzers.findings.finding import CATALOGUE
from analyzers.report import AnalysisReport, analyze
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
        help="Exit 1 when any rank's overlap ratio is below R (0.8 or 80 both mean 80 %). A rank whose "
             "ratio is undefined (no communication recognised in what was analysed) also fails the gate, "
             "named on stderr, unless --allow-undefined.")] = None,
    allow_undefined: Annotated[bool, typer.Option(
        "--allow-undefined",
        help="Let --fail-under-overlap pass ranks whose overlap ratio is undefined (still named on stderr).")
    ] = False,
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
        failed |= undefined_ratio_gate(report, allow_undefined)
    present = findings_present(report.findings or [], fail_ids)
    if present:
        err_console.print(f"[red]gate failed:[/red] finding(s) present: {', '.join(present)}")
        failed = True
    if failed:
        raise typer.Exit(EXIT_GATE)


def undefined_ratio_gate(report: AnalysisReport, allow: bool) -> bool:
    """Name on stderr the ranks the overlap gate could not measure; True (gate fails) unless allowed.

    A CI gate that measured nothing must not pass silently: no communication recognised (a custom
    comm kernel no rule knows) or none in the selected steps leaves the ratio undefined.
    """
    undefined = [m for m in report.ranks if m.overlap_ratio is None]
    if not undefined:
        return False
    hints = [n for m in undefined for n in m.notes if "look like it" in n][:1]
    ranks = ", ".join(str(m.rank) for m in undefined)
    verdict = "allowed (--allow-undefined)" if allow else "gate failed"
    colour = "yellow" if allow else "red"
    detail = (f"overlap ratio undefined for rank {ranks}: no communication recognised in the analysed steps, so "
              "--fail-under-overlap measured nothing there"
              + (f" ({hints[0]})" if hints else "; name custom comm kernels with --comm-kernel or --rules"))
    err_console.print(f"[{colour}]{verdict}:[/{colour}] {escape(detail)}", highlight=False)
    return not allow


def check_finding_ids(ids: list[str], no_diagnose: bool) -> list[str]:
    """--fail-on ids must be known finding ids, and need the diagnosis."""
    unknown = [i for i in ids if i not in CATALOGUE]
    if unknown:
        raise UsageFailure(f"--fail-on: unknown finding {', '.join(unknown)} (known: {', '.join(CATALOGUE)})")
    if ids and no_diagnose:
        raise UsageFailure("--fail-on needs the findings: drop --no-diagnose")
    return ids
