"""`overlapscope diff A B`: what a schedule change did, side by side.

Lives in its own module so the diff command can grow without touching `analyze`; cli.py
registers `diff_cmd` on the app.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from analyzers.io.discover import TRACE_SUFFIXES
from analyzers.timeline.constants import DEFAULT_STEP_PATTERN, KERNEL_NAME_MODES

from .common import (
    CommKernelOpt,
    JobsOpt,
    LikeHtaOpt,
    LinkGbpsOpt,
    NoCacheOpt,
    RulesOpt,
    SchedulerOpt,
    StepPatternOpt,
    StepsOpt,
    UsageFailure,
    check_output,
    err_console,
    load_set,
    options_from,
    out_console,
    write_bytes,
    writing,
)
from .extras import FIGURES, require_app_extra
from .stack_imports import analysis_stack_imports

if TYPE_CHECKING:  # the analysis stack is imported where it is used (fast `--help`)
    from analyzers.diff import TraceDiff
    from analyzers.timeline.model import TraceSet


class DiffFormat(StrEnum):
    table = "table"
    json = "json"
    md = "md"


KernelNames = StrEnum("KernelNames", {m: m for m in KERNEL_NAME_MODES})  # normalized | coarse | raw

SetArg = "A trace set: a file, a glob, a directory of rank files, or files joined by commas."


def parse_labels(text: str | None) -> tuple[str, str] | None:
    """'--labels a,b' -> ('a', 'b'); a usage error for anything else."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise UsageFailure(f"--labels takes two different names separated by a comma, got {text!r}")
    return parts[0], parts[1]


def set_inputs(arg: str) -> list[str]:
    """One positional argument -> the inputs of one trace set (comma lists allowed when no such path exists).

    A run folder is passed on as it is: the loader leaves out its manifest and status files.
    """
    if Path(arg).exists() or "," not in arg:
        return [arg]
    return [p for p in (x.strip() for x in arg.split(",")) if p]


def short_label(label: str) -> str:
    """'sample_traces/ag-gemm/host-sync' -> 'host-sync'; 'trace_diff_test.json.gz' -> 'trace_diff_test'."""
    name = Path(label).name if label else ""
    for suffix in TRACE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def default_labels(ta: TraceSet, tb: TraceSet) -> tuple[str, str]:
    """Names of the two sides from their directory or file names; A and B when those agree."""
    la, lb = short_label(ta.label), short_label(tb.label)
    return ("A", "B") if not la or not lb or la == lb else (la, lb)


def check_writable(path: Path, overwrite: bool, option: str, inputs: list[str] | None = None) -> None:
    """An output file is checked before any work (common.check_output): never an input, never clobbered
    unless asked, its folder must exist and be writable."""
    check_output(path, option, overwrite, inputs)


def emit_diff(d: TraceDiff, fmt: DiffFormat, top: int) -> None:
    from . import render, render_diff

    if fmt is DiffFormat.json:
        write_bytes((render.to_json(d.to_dict()) + "\n").encode())
    elif fmt is DiffFormat.md:
        sys.stdout.write(render_diff.to_markdown(d, top=top))
    else:
        render_diff.print_diff(d, out_console.console, top=top)


def diff_cmd(
    a: Annotated[str, typer.Argument(help=SetArg, show_default=False)],
    b: Annotated[str, typer.Argument(help=SetArg, show_default=False)],
    labels: Annotated[str | None, typer.Option(
        "--labels", help="Names of the two sides, e.g. --labels host-sync,sync-before-loop "
                         "(default: the directory or file names).")] = None,
    format: Annotated[DiffFormat, typer.Option("--format", "-f", help="Output format.")] = DiffFormat.table,
    steps: StepsOpt = None,
    rules: RulesOpt = None,
    comm_kernel: CommKernelOpt = None,
    like_hta: LikeHtaOpt = False,
    link_gbps: LinkGbpsOpt = None,
    step_pattern: StepPatternOpt = DEFAULT_STEP_PATTERN,
    kernel_names: Annotated[KernelNames, typer.Option(
        "--kernel-names", help="How kernels are matched across the two sides: normalized (template "
                               "arguments, argument lists and counters dropped), coarse (also tile sizes), "
                               "or raw.")] = KernelNames.normalized,
    top: Annotated[int, typer.Option("--top", min=1, help="Kernel rows to show (table and md).")] = 15,
    no_diagnose: Annotated[bool, typer.Option(
        "--no-diagnose", help="Metrics only: skip blocking-sync analysis and findings on both sides.")] = False,
    no_align: Annotated[bool, typer.Option(
        "--no-align", help="Do not align rank clocks (cross-rank analysis uses the clocks as recorded).")] = False,
    timeline: Annotated[Path | None, typer.Option(
        "--timeline", help="Also write both sides' GPU intervals, aligned at a common iteration start, "
                           "to this CSV file (for plotting A over B).")] = None,
    html: Annotated[Path | None, typer.Option(
        "--html", help="Also write a self-contained HTML report of the diff (verdict, tables, both timelines "
                       "on one x axis; opens with no network access).")] = None,
    jobs: JobsOpt = None,
    no_cache: NoCacheOpt = False,
    scheduler: SchedulerOpt = None,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace the --timeline / --html file if it exists (otherwise an existing file is "
                            "refused before any work).")] = False,
) -> None:
    """Compare two trace sets (schedule variants): every metric with deltas, findings on one side only,
    kernel changes, and a verdict."""
    with analysis_stack_imports():  # pandas, pyarrow, numpy (overlapscope/stack_imports.py)
        from analyzers.crossrank.collective_table import CollectiveParams
        from analyzers.diff import aligned_timelines, diff_reports
        from analyzers.report import analyze

    names = parse_labels(labels)
    options = options_from(steps, like_hta, step_pattern)
    inputs = [*set_inputs(a), *set_inputs(b)]
    if timeline is not None:
        check_writable(timeline, overwrite, "--timeline", inputs)
    if html is not None:
        require_app_extra("--html", FIGURES)
        check_writable(html, overwrite, "--html", inputs)
    common = dict(rules=rules, comm_kernel=comm_kernel, jobs=jobs, cache=not no_cache, scheduler=scheduler,
                  options=options, diagnose=not no_diagnose)
    ta = load_set(set_inputs(a), **common)
    tb = load_set(set_inputs(b), **common)
    names = names or default_labels(ta, tb)
    collective_params = CollectiveParams(link_gbps=link_gbps)
    ra = analyze(ta, options, diagnose=not no_diagnose, align=not no_align, collective_params=collective_params)
    rb = analyze(tb, options, diagnose=not no_diagnose, align=not no_align, collective_params=collective_params)
    ra.label, rb.label = names
    d = diff_reports(ra, rb, ta, tb, names, options=options, kernel_names=str(kernel_names))
    emit_diff(d, format, top)
    if timeline is not None:
        frame = aligned_timelines(ta, tb, labels=names, pattern=step_pattern)
        with writing(timeline, "--timeline") as tmp:
            from viz.safe_text import csv_frame

            csv_frame(frame).to_csv(tmp, index=False)
        al = frame.attrs["alignment"]
        err_console.print(f"aligned timelines ({len(frame)} intervals, at {al['how']}: "
                          f"step {al['step_a']} / {al['step_b']}) written to {timeline}",
                          markup=False, highlight=False)
    if html is not None:
        from viz.export_html import diff_html

        with writing(html, "--html") as tmp:
            tmp.write_text(diff_html(d, [(ta, ra), (tb, rb)]), encoding="utf-8")
        err_console.print(f"HTML diff report written to {html}", markup=False, highlight=False)
