"""`overlapscope whatif PATH... --fix FIX`: replay the trace set's dependency graph with fixes applied."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import msgspec
import typer

from analyzers.io import report_cache
from analyzers.timeline.constants import DEFAULT_STEP_PATTERN

from .cmd_analyze import _file_digest
from .common import (
    CommKernelOpt,
    JobsOpt,
    NoCacheOpt,
    OutputFormat,
    PathsArg,
    RulesOpt,
    StepPatternOpt,
    UsageFailure,
    err_console,
    load_set,
    options_from,
    out_console,
    write_bytes,
)
from .stack_imports import analysis_stack_imports

ET_HELP = ("PyTorch Execution Trace of a rank (torch.profiler.ExecutionTraceObserver JSON, .json or .json.gz; "
           "repeatable, one per rank, matched by the rank in its name: rank3.et.json.gz, as the runners record one "
           "beside each trace): which ops read each collective's output, the data dependencies the moves use.")
FIX_HELP = ("A fix to replay (repeatable; applied together): host-syncs, peer-wait, launch-gaps, comm-contention, "
            "serialized-streams, no-copies, prefetch[=N], coalesce, comm-first, agreed-order, "
            "drop=REGEX (those kernels take no time), comm-speed=F, compute-speed=F (F: how many times as fast). "
            "docs/whatif.md says what each one changes in the graph.")


def whatif_cmd(
    paths: PathsArg,
    fix: Annotated[list[str], typer.Option("--fix", metavar="FIX", help=FIX_HELP)],
    format: Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format (table, json or md).")
                      ] = OutputFormat.table,
    rules: RulesOpt = None,
    comm_kernel: CommKernelOpt = None,
    step_pattern: StepPatternOpt = DEFAULT_STEP_PATTERN,
    jobs: JobsOpt = None,
    no_cache: NoCacheOpt = False,
    et: Annotated[list[Path] | None, typer.Option("--et", metavar="FILE", help=ET_HELP)] = None,
) -> None:
    """Predict each step's time with fixes applied, by replaying the trace set's dependency graph.

    The measured step, the unmodified replay (its fidelity) and the prediction are medians over
    steps of the job's step (the slowest rank's). The answer is kept in the report cache: the same
    question on unchanged files prints it again without replaying (--no-cache recomputes).
    """
    if format is OutputFormat.csv:
        raise UsageFailure("--format: whatif writes table, json or md")
    # The report cache answers the same question on unchanged files again (the fixes in their order: a
    # fix applies to what the ones before it gave). Keyed by the fixes as written, so that a hit loads
    # no analysis stack (parsing them imports the graph, hence pandas: 0.4 s of a 0.9 s hit); a fix
    # spelt otherwise (comm-speed=2.0, comm-speed=2) is another entry of the same answer, and a fix that
    # does not parse never has one.
    key = None if no_cache else report_cache.ReportKey.of(paths, {
        "command": "whatif", "fixes": [f.strip() for f in fix], "rules": _file_digest(rules),
        "comm_kernel": comm_kernel or [], "step_pattern": step_pattern,
        "et": [_file_digest(p) for p in et or []]})
    doc = report_cache.get(key) if key is not None else None
    if doc is None:
        # What the per-rank workers run is imported before they fork (the parse cache's reader too: once here,
        # not in each worker); the replay's modules while they read (load_set's meanwhile), as `analyze` does.
        with analysis_stack_imports():
            from analyzers.graph.fixes import parse_fix
            from analyzers.io.exec_trace import read_exec_traces
            from analyzers.io.plain import json_bytes
            from analyzers.report import graph_run, import_caller_stages
            if not no_cache:
                import analyzers.io.parse_cache  # noqa: F401
        fixes = [parse_fix(f) for f in fix]
        options = options_from(None, False, step_pattern)
        exec_traces = read_exec_traces(et or [])
        traces = load_set(paths, rules=rules, comm_kernel=comm_kernel, jobs=jobs, cache=not no_cache,
                          options=options, diagnose=True, host_tables=False, graph_only=True,
                          exec_traces=exec_traces, meanwhile=import_caller_stages)
        from analyzers.graph.analysis import whatif

        result = whatif(graph_run(traces, options, exec_traces, fixes), fixes)
        result["label"] = traces.label
        doc = json_bytes(result)
        if key is not None:
            report_cache.put(key, doc)
    result = msgspec.json.decode(doc)
    if format is OutputFormat.json:
        write_bytes(doc + b"\n")
    elif format is OutputFormat.md:
        sys.stdout.write(to_markdown(result))
    else:
        print_table(result)
    for n in result["notes"]:
        err_console.print(f"note: {n}", markup=False, highlight=False)


def _ms(ns: int | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e6:.3f} ms"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def summary_lines(r: dict[str, Any]) -> list[tuple[str, str]]:
    fid = r["fidelity"]
    return [
        ("fixes", ", ".join(r["fixes"])),
        ("measured step", _ms(r["measured_step_ns"])),
        ("replayed step (no fix)", f"{_ms(r['replayed_step_ns'])} (median error {_pct(fid['median_abs_error'])})"),
        ("predicted step", _ms(r["predicted_step_ns"])),
        ("saving", f"{_ms(r['saving_ns'])} per step ({_pct(r['saving_fraction'])})"),
    ]


def to_markdown(r: dict[str, Any]) -> str:
    from viz.safe_text import markdown_row, markdown_text

    out = [f"# What if: {markdown_text(', '.join(r['fixes']))}", "", "| | |", "|---|---|"]
    out += [markdown_row([k, v]) for k, v in summary_lines(r)]
    out += ["", "| step | slowest rank | measured | replayed | predicted |", "|---|---|---|---|---|"]
    out += [f"| {s['step']} | {s['measured_rank']} | {_ms(s['measured_ns'])} | {_ms(s['replayed_ns'])} | "
            f"{_ms(s['predicted_ns'])} |" for s in r["per_step"]]
    out += ["", "| rank | measured | replayed | predicted |", "|---|---|---|---|"]
    out += [f"| {p['rank']} | {_ms(p['measured_step_ns'])} | {_ms(p['replayed_step_ns'])} | "
            f"{_ms(p['predicted_step_ns'])} |" for p in r["per_rank"]]
    return "\n".join(out) + "\n"


def print_table(r: dict[str, Any]) -> None:
    from rich.table import Table

    from viz.safe_text import terminal_text

    head = Table(title=terminal_text(f"what if: {', '.join(r['fixes'])}"), show_header=False)
    for k, v in summary_lines(r):
        head.add_row(terminal_text(k), terminal_text(v))
    steps = Table(title="per step (the job's step: the slowest rank)")
    for c in ("step", "slowest rank", "measured", "replayed", "predicted"):
        steps.add_column(c, justify="right")
    for s in r["per_step"]:
        steps.add_row(str(s["step"]), str(s["measured_rank"]), _ms(s["measured_ns"]), _ms(s["replayed_ns"]),
                      _ms(s["predicted_ns"]))
    ranks = Table(title="per rank (median step)")
    for c in ("rank", "measured", "replayed", "predicted"):
        ranks.add_column(c, justify="right")
    for p in r["per_rank"]:
        ranks.add_row(str(p["rank"]), _ms(p["measured_step_ns"]), _ms(p["replayed_step_ns"]),
                      _ms(p["predicted_step_ns"]))
    for t in (head, steps, ranks):
        out_console.console.print(t)
