"""What every command shares: the typer app, consoles, exit codes, common options and helpers.

Command modules (cmd_*.py) import from here; this module imports none of them, and cli.py
registers the commands on `app` in one place.

Data goes to stdout, progress and notes to stderr. Exit codes: 0 ok, 1 a gate failed,
2 usage error, 3 bad input, 4 a run failed.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from analyzers.io.environment import ENV_SCHEDULER, scheduler_from_env

if TYPE_CHECKING:  # the analysis stack (pandas) is imported where it is used: `--help` and cache hits stay fast
    from rich.console import Console

    from analyzers.overlap.metrics import AnalysisOptions
    from analyzers.report import AnalysisReport
    from analyzers.timeline.model import TraceSet

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

class LazyConsole:
    """A rich Console made on first use (its attributes are the Console's): a command that prints
    nothing through rich (`analyze -f json`, a report-cache hit) does not import it, 15 ms of the
    serial start before the per-rank workers fork (1 % of an 8-rank analysis, benchmarks/RESULTS.md).
    Wide when piped (tables must not wrap into logs); soft-wrapped so errors stay one line."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            probe = Console(stderr=self._stderr)
            self._console = Console(stderr=self._stderr, soft_wrap=True, width=None if probe.is_terminal else 200)
        return self._console

    @property
    def is_terminal(self) -> bool:
        """Console.is_terminal; False without asking rich where rich would say so: no TTY_COMPATIBLE=1,
        no FORCE_COLOR, and a stream that is no TTY."""
        if self._console is None and not _maybe_terminal(sys.stderr if self._stderr else sys.stdout):
            return False
        return self.console.is_terminal

    def __getattr__(self, name: str) -> Any:
        return getattr(self.console, name)


def _maybe_terminal(stream: Any) -> bool:
    if os.environ.get("TTY_COMPATIBLE") == "1" or "FORCE_COLOR" in os.environ:
        return True
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream: rich says False too
        return False


out_console = LazyConsole(stderr=False)
err_console = LazyConsole(stderr=True)


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
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                  console=err_console.console, transient=True) as bar:
        task = bar.add_task("loading traces", total=None)

        def update(name: str, i: int, total: int) -> None:
            bar.update(task, completed=i, total=total,
                       description=f"loading {Path(name).name}" if name else "loaded")

        yield update


def load_set(paths: list[str], *, rank: int | None = None, rules: Path | None = None,
             comm_kernel: list[str] | None = None, label: str = "", jobs: int | None = None,
             cache: bool = True, scheduler: str | None = None, options: AnalysisOptions | None = None,
             diagnose: bool = True, require_gpu: bool = True, host_tables: bool = True,
             ranks: str | None = None) -> TraceSet:
    """Load a trace set with progress on stderr (several files) and classification rules.

    Files are parsed in parallel (jobs workers, default one per core, or on the Dask cluster
    at scheduler / $OVERLAPSCOPE_SCHEDULER), through the parse cache unless cache=False; with
    options, the per-rank analysis runs beside the parse. host_tables=False: the caller analyzes
    with exactly these options and reads no host table itself, so the workers keep them (RankStage).
    """
    from analyzers.io.load import load_traces
    from analyzers.report import RankStage
    from analyzers.timeline.classify import load_rules

    rule_list = load_rules(rules, comm_kernel)
    selected = None
    if ranks is not None:
        from analyzers.io.rank_select import parse_ranks

        try:
            selected = parse_ranks(ranks)
        except ValueError as exc:
            raise UsageFailure(f"--ranks: {exc}") from None
    many = len(paths) > 1 or any(Path(p).is_dir() or any(c in p for c in "*?[") for p in paths)
    with load_progress(many and err_console.is_terminal) as progress:
        return load_traces(paths, rank=rank, rules=rule_list, label=label, progress=progress, jobs=jobs,
                           cache=cache, scheduler=scheduler_from_env(scheduler),
                           per_rank=RankStage(options, diagnose, host_tables) if options is not None else None,
                           require_gpu=require_gpu, ranks=selected)


def options_from(steps: str | None, like_hta: bool, step_pattern: str) -> AnalysisOptions:
    from analyzers.overlap.metrics import AnalysisOptions
    from analyzers.timeline.iterations import StepSelection

    try:
        selection = StepSelection.parse(steps)
    except ValueError as exc:
        raise UsageFailure(f"--steps: {exc}") from None
    return AnalysisOptions(steps=selection, like_hta=like_hta, step_pattern=step_pattern)


def write_bytes(data: bytes) -> None:
    """UTF-8 bytes to stdout as they are (a 3 MB document is not decoded and re-encoded on its way)."""
    out = getattr(sys.stdout, "buffer", None)
    if out is None:  # a text-only stream (some test harnesses)
        sys.stdout.write(data.decode())
        return
    sys.stdout.flush()  # whatever text went before stays before
    out.write(data)
    out.flush()


def emit(report: AnalysisReport, fmt: OutputFormat, streams: bool = False) -> None:
    """The report in the format asked for, drawn from its JSON document (as emit_document)."""
    from .render_json import report_json

    emit_document(report_json(report), fmt, streams=streams)


def emit_document(doc: bytes, fmt: OutputFormat, streams: bool = False) -> None:
    """An analysis document (the JSON bytes `-f json` prints, as the report cache keeps them) in the format
    asked for: JSON as it is, every other format rendered from it (overlapscope/render.py)."""
    if fmt is OutputFormat.json:
        write_bytes(doc + b"\n")
        return
    import msgspec

    from . import render

    data = msgspec.json.decode(doc)
    if fmt is OutputFormat.md:
        sys.stdout.write(render.to_markdown(data))
    elif fmt is OutputFormat.csv:
        sys.stdout.write(render.to_csv(data))
    else:
        render.print_table(data, out_console.console, streams=streams)


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
JobsOpt = Annotated[int | None, typer.Option(
    "--jobs", "-j", min=1, help="Worker processes that parse and analyze ranks in parallel (default: one per core).",
    show_default=False)]
NoCacheOpt = Annotated[bool, typer.Option(
    "--no-cache", help="Parse every file again instead of reading its tables from the parse cache "
                       "(see `overlapscope cache info`).")]
SchedulerOpt = Annotated[str | None, typer.Option(
    "--scheduler", metavar="ADDRESS",
    help=f"Run the per-rank stage on this Dask distributed scheduler (e.g. tcp://host:8786; also "
         f"${ENV_SCHEDULER}); the cross-rank stage runs here. Workers must see the same trace paths.",
    show_default=False)]
StepPatternOpt = Annotated[str, typer.Option(
    "--step-pattern", help="Regex naming iteration ranges (ProfilerStep#N or NVTX); group 1 = step number.")]


@contextmanager
def stage_progress(enabled: bool):
    """A spinner on stderr naming the analysis stage (metrics, cross-rank, findings)."""
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                  TimeElapsedColumn(), console=err_console.console, transient=True) as bar:
        task = bar.add_task("analyzing", total=None)

        def update(stage: str, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, description=f"analyzed {stage}")

        yield update
