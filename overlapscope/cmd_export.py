"""`overlapscope export`: files to attach to a pull request or open in a viewer (registered on the cli app).

--perfetto writes Chrome-trace JSON for ui.perfetto.dev (every kernel, ranks on one clock),
--html a self-contained report, --png / --svg the timeline as an image. With --diff A B the
HTML and the image show the comparison of two trace sets.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from analyzers.timeline.constants import DEFAULT_STEP_PATTERN

from .cmd_diff import default_labels, parse_labels, set_inputs
from .common import (
    EXIT_RUN_FAILED,
    MAX_RANK,
    CommKernelOpt,
    LinkGbpsOpt,
    RulesOpt,
    StepPatternOpt,
    StepsOpt,
    UsageFailure,
    check_output,
    err_console,
    load_set,
    options_from,
    stage_progress,
    writing,
)
from .extras import FIGURES, IMAGES, require_app_extra
from .stack_imports import analysis_stack_imports

if TYPE_CHECKING:  # the analysis stack is imported where it is used (fast `--help`)
    from analyzers.report import AnalysisReport
    from analyzers.timeline.model import TraceSet

OutOpt = Path | None


def _note(text: str) -> None:
    err_console.print(text, markup=False, highlight=False)


def _size(path: Path) -> str:
    n = path.stat().st_size
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def write_images(fig, png: Path | None, svg: Path | None, width: int, height: int | None) -> None:
    """PNG / SVG of a timeline figure through kaleido and the system Chromium; one line on failure."""
    from viz.export_html import ImageExportError, figure_image, image_browser

    try:
        with image_browser():
            for path, fmt in ((png, "png"), (svg, "svg")):
                if path is None:
                    continue
                t0 = time.perf_counter()
                with writing(path, f"--{fmt}") as tmp:
                    tmp.write_bytes(figure_image(fig, fmt, width=width, height=height))
                _note(f"{fmt.upper()} timeline written to {path} ({_size(path)}, {time.perf_counter() - t0:.1f} s)")
    except ImageExportError as exc:
        err_console.print(f"overlapscope: error: {exc}", markup=False, highlight=False)
        raise typer.Exit(EXIT_RUN_FAILED) from None


def export_cmd(
    paths: Annotated[list[str] | None, typer.Argument(
        help="Trace files (.json, .json.gz, .sqlite, .nsys-rep), globs, or a directory of rank files of one run.",
        show_default=False)] = None,
    perfetto: OutOpt = typer.Option(
        None, "--perfetto", help="Write Chrome-trace JSON (.json or .json.gz) for ui.perfetto.dev / chrome://tracing: "
                                 "every GPU activity, ranks as processes on one clock, plus hidden / exposed "
                                 "communication, peer wait, host-sync and finding tracks."),
    html_out: OutOpt = typer.Option(
        None, "--html", help="Write a self-contained HTML report (opens with no network access)."),
    png: OutOpt = typer.Option(None, "--png", help="Write the timeline as a PNG image (system Chromium via kaleido)."),
    svg: OutOpt = typer.Option(None, "--svg", help="Write the timeline as an SVG image."),
    collectives_csv: OutOpt = typer.Option(
        None, "--collectives-csv", help="Write the collectives table as CSV: one row per communication activity "
                                        "(rank, operation, process group, bytes, wait / transfer ns, algbw / busbw "
                                        "GB/s, share of the transfer with compute beside, fraction of the link)."),
    link_gbps: LinkGbpsOpt = None,
    diff: Annotated[tuple[str, str] | None, typer.Option(
        "--diff", metavar="A B", help="Compare two trace sets instead of PATHS (HTML and images show the diff).",
        show_default=False)] = None,
    labels: Annotated[str | None, typer.Option("--labels", help="Names of the two --diff sides, e.g. before,after.")
                      ] = None,
    width: Annotated[int, typer.Option("--width", min=200, max=16000, help="Image width (px).")] = 1600,
    height: Annotated[int | None, typer.Option(
        "--height", min=100, max=16000, help="Image height (px); default: what the lanes need.")] = None,
    steps: StepsOpt = None,
    rules: RulesOpt = None,
    comm_kernel: CommKernelOpt = None,
    step_pattern: StepPatternOpt = DEFAULT_STEP_PATTERN,
    rank: Annotated[int | None, typer.Option(
        "--rank", min=0, max=MAX_RANK, help="Rank of a single trace file that names none.")] = None,
    no_align: Annotated[bool, typer.Option("--no-align", help="Do not align rank clocks.")] = False,
    no_diagnose: Annotated[bool, typer.Option(
        "--no-diagnose", help="Metrics only: no findings, host syncs or their tracks.")] = False,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace output files that exist (otherwise they are refused before any work).")
    ] = False,
) -> None:
    """Export a trace set for sharing: Perfetto JSON, a self-contained HTML report, a PNG/SVG timeline, the
    collectives table as CSV."""
    if not any((perfetto, html_out, png, svg, collectives_csv)):
        raise UsageFailure("nothing to write: give --perfetto, --html, --png, --svg and/or --collectives-csv")
    inputs = [*(paths or []), *(set_inputs(diff[0]) + set_inputs(diff[1]) if diff is not None else [])]
    outputs = ((perfetto, "--perfetto", (".json", ".json.gz")), (html_out, "--html", (".html", ".htm")),
               (png, "--png", (".png",)), (svg, "--svg", (".svg",)),
               (collectives_csv, "--collectives-csv", (".csv",)))
    for out, option, suffixes in outputs:
        if out is not None:
            check_output(out, option, overwrite, inputs, suffixes)
    if diff is not None and paths:
        raise UsageFailure("give either PATHS or --diff A B, not both")
    if diff is None and not paths:
        raise UsageFailure("give the trace files to export (PATHS) or --diff A B")
    if diff is not None and (perfetto is not None or collectives_csv is not None):
        raise UsageFailure("--perfetto and --collectives-csv export one trace set: run them on A and on B separately")
    if png is not None or svg is not None:
        require_app_extra("--png / --svg", IMAGES)
    if html_out is not None:
        require_app_extra("--html", FIGURES)
    with analysis_stack_imports():  # pandas, pyarrow, numpy (overlapscope/stack_imports.py)
        from analyzers.crossrank.collective_table import CollectiveParams
        from analyzers.diff import diff_reports
        from analyzers.export.perfetto import perfetto_data
        from analyzers.report import analyze

    options = options_from(steps, False, step_pattern)

    def analyzed(inputs: list[str], label: str = "") -> tuple[TraceSet, AnalysisReport]:
        traces = load_set(inputs, rank=rank, rules=rules, comm_kernel=comm_kernel, label=label)
        with stage_progress(err_console.is_terminal) as progress:
            report = analyze(traces, options, diagnose=not no_diagnose, align=not no_align, progress=progress,
                             collective_params=CollectiveParams(link_gbps=link_gbps))
        return traces, report

    if any((html_out, png, svg)):
        from viz import export_html

    if diff is not None:
        names = parse_labels(labels)
        (ta, ra), (tb, rb) = analyzed(set_inputs(diff[0])), analyzed(set_inputs(diff[1]))
        names = names or default_labels(ta, tb)
        ra.label, rb.label = names
        d = diff_reports(ra, rb, ta, tb, names, options=options)
        _note(d.verdict)
        if html_out is not None:
            t0 = time.perf_counter()
            with writing(html_out, "--html") as tmp:
                tmp.write_text(export_html.diff_html(d, [(ta, ra), (tb, rb)]), encoding="utf-8")
            _note(f"HTML diff report written to {html_out} ({_size(html_out)}, {time.perf_counter() - t0:.1f} s)")
        if png is not None or svg is not None:
            datas = [export_html.report_timeline(ta, ra, names[0]), export_html.report_timeline(tb, rb, names[1])]
            fig = export_html.timeline_of(datas, export_html.diff_windows(d, datas), width_px=width)
            write_images(fig, png, svg, width, height)
        return

    traces, report = analyzed(list(paths or []))
    if collectives_csv is not None and report.collectives is not None:
        with writing(collectives_csv, "--collectives-csv") as tmp:
            from viz.safe_text import csv_frame

            csv_frame(report.collectives.rows).to_csv(tmp, index=False)
        _note(f"collectives table written to {collectives_csv} ({len(report.collectives.rows):,} rows)")
    if perfetto is not None:
        t0 = time.perf_counter()
        data = perfetto_data(traces, report)
        from viz.perfetto_json import write_perfetto

        with writing(perfetto, "--perfetto") as tmp:
            write_perfetto(data, tmp)
        _note(f"Perfetto trace written to {perfetto} ({len(data.gpu):,} GPU activities, {len(data.spans):,} "
              f"analysis spans, {len(data.markers)} finding markers; {_size(perfetto)}, "
              f"{time.perf_counter() - t0:.1f} s): open it at https://ui.perfetto.dev")
    timeline = None
    if html_out is not None:
        t0 = time.perf_counter()
        timeline = export_html.report_timeline(traces, report)
        with writing(html_out, "--html") as tmp:
            tmp.write_text(export_html.report_html(traces, report, timeline), encoding="utf-8")
        _note(f"HTML report written to {html_out} ({_size(html_out)}, {time.perf_counter() - t0:.1f} s)")
    if png is not None or svg is not None:
        timeline = timeline or export_html.report_timeline(traces, report)
        write_images(export_html.timeline_of([timeline], width_px=width), png, svg, width, height)
