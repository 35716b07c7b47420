"""The `overlapscope` command line: wires analyzers, runners and app together.

Data goes to stdout, progress and notes to stderr. Exit codes: 0 ok, 1 a gate failed,
2 usage error, 3 bad input, 4 a run failed.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from analyzers.classify import load_rules
from analyzers.errors import BadInputError
from analyzers.finding import CATALOGUE
from analyzers.findings import findings_present
from analyzers.iterations import DEFAULT_STEP_PATTERN, StepSelection, UnknownStepsError
from analyzers.load import load_traces
from analyzers.metrics import AnalysisOptions
from analyzers.model import TraceSet
from analyzers.report import AnalysisReport, analyze

from . import render

EXIT_OK, EXIT_GATE, EXIT_USAGE, EXIT_BAD_INPUT, EXIT_RUN_FAILED = 0, 1, 2, 3, 4

app = typer.Typer(
    name="overlapscope",
    help="Is your GPU communication really hidden behind computation? Measures comm/compute overlap "
         "per rank, stream and iteration in PyTorch profiler (Kineto JSON) and Nsight Systems traces, "
         "and explains what breaks it.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)

def _console(stderr: bool) -> Console:
    """Wide when piped (tables must not wrap into logs); soft-wrapped so errors stay one line."""
    probe = Console(stderr=stderr)
    return Console(stderr=stderr, soft_wrap=True, width=None if probe.is_terminal else 200)


out_console = _console(stderr=False)
err_console = _console(stderr=True)


class OutputFormat(StrEnum):
    table = "table"
    json = "json"
    md = "md"
    csv = "csv"


class UsageFailure(Exception):
    """A usage problem found after parsing (exit 2)."""


@contextmanager
def load_progress(enabled: bool):
    """A progress bar on stderr while several files load; a no-op callback otherwise."""
    if not enabled:
        yield None
        return
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                  console=err_console, transient=True) as bar:
        task = bar.add_task("loading traces", total=None)

        def update(name: str, i: int, total: int) -> None:
            bar.update(task, completed=i, total=total,
                       description=f"loading {Path(name).name}" if name else "loaded")

        yield update


def load_set(paths: list[str], *, rank: int | None = None, rules: Path | None = None,
             comm_kernel: list[str] | None = None, label: str = "") -> TraceSet:
    """Load a trace set with progress on stderr (several files) and classification rules."""
    rule_list = load_rules(rules, comm_kernel)
    many = len(paths) > 1 or any(Path(p).is_dir() or any(c in p for c in "*?[") for p in paths)
    with load_progress(many and err_console.is_terminal) as progress:
        return load_traces(paths, rank=rank, rules=rule_list, label=label, progress=progress)


def options_from(steps: str | None, like_hta: bool, step_pattern: str) -> AnalysisOptions:
    try:
        selection = StepSelection.parse(steps)
    except ValueError as exc:
        raise UsageFailure(f"--steps: {exc}") from None
    return AnalysisOptions(steps=selection, like_hta=like_hta, step_pattern=step_pattern)


def emit(report: AnalysisReport, fmt: OutputFormat, streams: bool = False) -> None:
    if fmt is OutputFormat.json:
        sys.stdout.write(render.to_json(report.to_dict()) + "\n")
    elif fmt is OutputFormat.md:
        sys.stdout.write(render.to_markdown(report))
    elif fmt is OutputFormat.csv:
        sys.stdout.write(render.to_csv(report))
    else:
        render.print_table(report, out_console, streams=streams)


def gate_threshold(value: float) -> float:
    """--fail-under-overlap takes a fraction (0.8) or a percentage (80)."""
    if value < 0:
        raise UsageFailure("--fail-under-overlap must be >= 0")
    return value / 100.0 if value > 1 else value


PathsArg = Annotated[list[str], typer.Argument(
    help="Trace files (.json, .json.gz, .sqlite, .nsys-rep), globs, or a directory of rank files of one run.",
    show_default=False)]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format.")]
StepsOpt = Annotated[str | None, typer.Option(
    "--steps", help="Only these profiler steps, e.g. 3, 2-4 or 2,5,7 (ProfilerStep#N numbers): the table, syncs, "
                    "findings and cross-rank analysis all see only them. A step not in every rank's trace is "
                    "refused (exit 2).")]
RulesOpt = Annotated[Path | None, typer.Option(
    "--rules", help="TOML file of (pattern -> category) rules tried before the defaults.")]
CommKernelOpt = Annotated[list[str] | None, typer.Option(
    "--comm-kernel", help="A custom communication kernel name (substring); repeatable.")]
LikeHtaOpt = Annotated[bool, typer.Option(
    "--like-hta", help="Drop kernels launched in the last profiler step (and round to µs), as "
                       "HolisticTraceAnalysis 0.5.0 does, to reproduce its overlap figure.")]
StepPatternOpt = Annotated[str, typer.Option(
    "--step-pattern", help="Regex naming iteration ranges (ProfilerStep#N or NVTX); group 1 = step number.")]


@app.callback()
def _root() -> None:
    """Is your GPU communication really hidden behind computation?"""


@app.command("analyze")
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
) -> None:
    """Measure comm/compute overlap per rank, stream and iteration."""
    options = options_from(steps, like_hta, step_pattern)
    threshold = gate_threshold(fail_under_overlap) if fail_under_overlap is not None else None
    fail_ids = check_finding_ids(fail_on or [], no_diagnose)
    traces = load_set(paths, rank=rank, rules=rules, comm_kernel=comm_kernel)
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


@contextmanager
def stage_progress(enabled: bool):
    """A spinner on stderr naming the analysis stage (metrics, cross-rank, findings)."""
    if not enabled:
        yield None
        return
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                  TimeElapsedColumn(), console=err_console, transient=True) as bar:
        task = bar.add_task("analyzing", total=None)

        def update(stage: str, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, description=f"analyzed {stage}")

        yield update




def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app, turning bad input into one line and exit code 3.

    Typer handles usage errors itself (exit 2, with help); our own errors surface here.
    """
    try:
        app(args=argv, prog_name="overlapscope", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except BadInputError as exc:
        err_console.print(f"overlapscope: error: {exc}", markup=False, highlight=False)
        return EXIT_BAD_INPUT
    except (UsageFailure, UnknownStepsError) as exc:
        err_console.print(f"overlapscope: usage error: {exc}", markup=False, highlight=False)
        return EXIT_USAGE
    return EXIT_OK




def run() -> None:
    """Console-script entry point (exit with main's code)."""
    sys.exit(main())


from . import cmd_app  # noqa: E402,F401,I001  (registers the app command)
from . import cmd_diff  # noqa: E402,F401,I001  (registers the diff command)
from . import cmd_run  # noqa: E402,F401,I001  (registers run, sweep, algorithms)
