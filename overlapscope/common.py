"""What every command shares: the typer app, consoles, exit codes, common options and helpers.

Command modules (cmd_*.py) import from here; this module imports none of them, and cli.py
registers the commands on `app` in one place.

Data goes to stdout, progress and notes to stderr. Exit codes: 0 ok, 1 a gate failed,
2 usage error, 3 bad input, 4 a run failed.
"""

from __future__ import annotations

import math
import os
import re
import sys
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from analyzers.io.environment import ENV_SCHEDULER, scheduler_from_env

if TYPE_CHECKING:  # the analysis stack (pandas) is imported where it is used: `--help` and cache hits stay fast
    from collections.abc import Callable

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

            from viz.safe_text import text_only_console

            probe = Console(stderr=self._stderr)
            self._console = text_only_console(stderr=self._stderr, soft_wrap=True,
                                              width=None if probe.is_terminal else 200)
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
            from viz.safe_text import terminal_text  # the description is rich markup: a file name is text

            bar.update(task, completed=i, total=total,
                       description=f"loading {terminal_text(Path(name).name)}" if name else "loaded")

        yield update


def load_set(paths: list[str], *, rank: int | None = None, rules: Path | None = None,
             comm_kernel: list[str] | None = None, label: str = "", jobs: int | None = None,
             cache: bool = True, scheduler: str | None = None, options: AnalysisOptions | None = None,
             diagnose: bool = True, require_gpu: bool = True, host_tables: bool = True,
             ranks: str | None = None, graph_only: bool = False, exec_traces: tuple = (),
             meanwhile: Callable[[], None] | None = None) -> TraceSet:
    """Load a trace set with progress on stderr (several files) and classification rules.

    Files are parsed in parallel (jobs workers, default one per core, or on the Dask cluster
    at scheduler / $OVERLAPSCOPE_SCHEDULER), through the parse cache unless cache=False; with
    options, the per-rank analysis runs beside the parse. host_tables=False: the caller analyzes
    with exactly these options and reads no host table itself, so the workers keep them (RankStage).
    graph_only: the workers compute only what report.graph_run reads (`whatif`); exec_traces: the ranks'
    Execution Traces (analyzers.io.exec_trace), which the workers lay onto each rank's graph. meanwhile:
    what the caller does while the workers parse (imports only it needs: report.import_caller_stages).
    """
    from analyzers.io.load import load_traces
    from analyzers.report import RankStage
    from analyzers.timeline.classify import load_rules

    comm_kernel = check_comm_kernels(comm_kernel)
    scheduler = resolved_scheduler(scheduler)
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
                           per_rank=(RankStage(options, diagnose, host_tables, graph_only, exec_traces)
                                     if options is not None else None),
                           require_gpu=require_gpu, ranks=selected, meanwhile=meanwhile)


def options_from(steps: str | None, like_hta: bool, step_pattern: str) -> AnalysisOptions:
    from analyzers.overlap.metrics import AnalysisOptions
    from analyzers.timeline.iterations import StepSelection

    try:
        selection = StepSelection.parse(steps)
    except ValueError as exc:
        raise UsageFailure(f"--steps: {exc}") from None
    return AnalysisOptions(steps=selection, like_hta=like_hta, step_pattern=check_step_pattern(step_pattern))


def check_step_pattern(pattern: str) -> str:
    """--step-pattern must compile, and have a group for the step number if it has groups at all."""
    if not pattern.strip():
        raise UsageFailure("--step-pattern: empty; give a regex such as '^ProfilerStep#(\\d+)$'")
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise UsageFailure(f"--step-pattern {pattern!r}: not a valid regex ({exc})") from None
    return pattern


def check_comm_kernels(patterns: list[str] | None) -> list[str] | None:
    """--comm-kernel names a kernel by a substring: an empty or blank one would match every kernel and
    call all of them communication."""
    for p in patterns or []:
        if not p.strip():
            raise UsageFailure("--comm-kernel: an empty name matches every kernel; give part of a kernel name")
    return patterns


SCHEDULER_SCHEMES = ("tcp", "tls", "ucx", "inproc", "ws", "wss")


def check_scheduler(address: str | None, source: str = "--scheduler") -> str | None:
    """A Dask scheduler address that parses (scheme://host:port, or host:port), checked before any
    connection is tried: a malformed one fails at once with one line, not after the connect timeout."""
    if not address:
        return address
    from urllib.parse import urlsplit

    text = address if "://" in address else f"tcp://{address}"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise UsageFailure(f"{source} {address!r}: not a scheduler address ({exc}); e.g. tcp://host:8786") from None
    if parts.scheme not in SCHEDULER_SCHEMES or not parts.hostname or (parts.scheme != "inproc" and port is None):
        raise UsageFailure(f"{source} {address!r}: not a scheduler address; e.g. tcp://host:8786 "
                           f"(schemes: {', '.join(SCHEDULER_SCHEMES)})")
    return address


def resolved_scheduler(scheduler: str | None) -> str | None:
    """--scheduler, else $OVERLAPSCOPE_SCHEDULER, checked (check_scheduler): a command that may answer from its
    report cache checks it first, so a malformed address fails the same way with or without a cached answer."""
    if scheduler:
        return check_scheduler(scheduler)
    return check_scheduler(scheduler_from_env(None), f"${ENV_SCHEDULER}")


MAX_RANK = (1 << 20) - 1  # analyzers.io.input_limits.MAX_WORLD_SIZE - 1 (that module imports numpy)
MAX_JOBS = 1024


def write_bytes(data: bytes) -> None:
    """UTF-8 bytes to stdout as they are (a 3 MB document is not decoded and re-encoded on its way); to a
    terminal, with the characters it may act on as JSON \\u escapes (viz.safe_text.json_for_terminal)."""
    if _maybe_terminal(sys.stdout):
        from viz.safe_text import json_for_terminal

        data = json_for_terminal(data)
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
    """--fail-under-overlap takes a fraction (0.8) or a percentage (80); NaN (which no ratio is below,
    so the gate would never fail), infinities and values past 100 % are refused."""
    if not math.isfinite(value) or not 0 <= value <= 100:
        raise UsageFailure(f"--fail-under-overlap {value}: give a fraction (0 to 1) or a percentage (up to 100)")
    return value / 100.0 if value > 1 else value


def check_output(path: Path, option: str, overwrite: bool, inputs: list[str] | None = None,
                 suffixes: tuple[str, ...] = ()) -> None:
    """An output file, checked before any work: the right suffix, never an input (also through links),
    never clobbered unless asked, a regular file if it exists, in a folder that exists and can be written."""
    if suffixes and not str(path).lower().endswith(suffixes):
        raise UsageFailure(f"{option} {path}: the file name must end in {' or '.join(suffixes)}")
    if path.is_dir():
        raise UsageFailure(f"{option} {path}: is a directory; give a file name")
    if inputs:
        _refuse_input_as_output(path, option, inputs)
    if path.exists() or path.is_symlink():
        if not overwrite:
            raise UsageFailure(f"{option} {path}: the file exists; pass --overwrite to replace it")
        if not path.is_file():
            raise UsageFailure(f"{option} {path}: not a regular file (a device, pipe or dangling link); "
                               "give a file name")
    folder = path.resolve().parent
    if not folder.is_dir():
        raise UsageFailure(f"{option} {path}: folder {path.parent} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageFailure(f"{option} {path}: folder {path.parent} is not writable")


def check_out_folder(out: Path) -> None:
    """--out must be a folder or a path one can make: a file there (or in its way) is refused in one line
    (exit 2), before torchrun starts."""
    for p in (out, *out.parents):
        if p.exists() or p.is_symlink():
            if not p.is_dir():
                what = "is a file" if p == out else f"cannot be made: {p} is a file"
                raise UsageFailure(f"--out {out}: {what}, not a folder; give a folder for the run's traces")
            if not os.access(p, os.W_OK | os.X_OK):
                raise UsageFailure(f"--out {out}: {p} is not writable")
            return


def _refuse_input_as_output(path: Path, option: str, inputs: list[str]) -> None:
    from analyzers.errors import BadInputError
    from analyzers.io.discover import JOURNALS, expand_paths

    try:
        files = expand_paths(inputs)
    except BadInputError:
        return  # the load reports it, with its own line
    target = path.resolve()
    for f in files:
        same = f.resolve() == target or (path.exists() and os.path.samefile(f, path))
        if same or any(f.with_name(f.name + j).resolve() == target for j in JOURNALS):
            raise UsageFailure(f"{option} {path}: is an input of this command ({f}); give another file name")


@contextmanager
def writing(path: Path, option: str):
    """Write an output through a temporary file beside it, moved into place when complete
    (analyzers/io/atomic_write.py: made in a private folder, so a planted file or link is never followed): a
    full disk or a failed write leaves no partial file, and names the problem in one line (exit 2)."""
    from analyzers.io.atomic_write import atomic_path

    try:
        with atomic_path(path) as tmp:
            yield tmp
    except OSError as exc:
        raise UsageFailure(f"{option} {path}: cannot write ({exc.strerror or exc})") from None


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
LinkGbpsOpt = Annotated[float | None, typer.Option(
    "--link-gbps", min=0.001, metavar="GBPS",
    help="Peak link bandwidth of one GPU, per direction, in GB/s: the collectives table gives bus bandwidth as a "
         "fraction of it (default: from the GPU model the trace names, e.g. H100/H200 450, A100 300, B200 900, "
         "MI300X 448; none for an unknown model).")]
LikeHtaOpt = Annotated[bool, typer.Option(
    "--like-hta", help="Drop kernels launched in the last profiler step (and round to µs), as "
                       "HolisticTraceAnalysis 0.5.0 does, to reproduce its overlap figure.")]
JobsOpt = Annotated[int | None, typer.Option(
    "--jobs", "-j", min=1, max=MAX_JOBS,
    help="Worker processes that parse and analyze ranks in parallel (default: one per core).",
    show_default=False)]
NoCacheOpt = Annotated[bool, typer.Option(
    "--no-cache", help="Parse every file again instead of reading its tables from the parse cache, and (analyze) "
                       "analyze again instead of printing the report cache's answer (see `overlapscope cache info`).")]
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
