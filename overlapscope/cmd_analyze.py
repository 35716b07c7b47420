"""`overlapscope analyze PATH...`: overlap metrics, cross-rank analysis and findings of one trace set."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import typer

from analyzers.io import report_cache
from analyzers.timeline.constants import DEFAULT_STEP_PATTERN
from viz.formats import pct

from .common import (
    EXIT_GATE,
    MAX_RANK,
    CommKernelOpt,
    FormatOpt,
    JobsOpt,
    LikeHtaOpt,
    LinkGbpsOpt,
    NoCacheOpt,
    OutputFormat,
    PathsArg,
    RulesOpt,
    SchedulerOpt,
    StepPatternOpt,
    StepsOpt,
    UsageFailure,
    emit_document,
    err_console,
    gate_threshold,
    load_set,
    options_from,
    resolved_scheduler,
    stage_progress,
)
from .finding_ids import FINDING_IDS
from .stack_imports import analysis_stack_imports, imports_without_gc

if TYPE_CHECKING:
    from analyzers.report import AnalysisReport


def analyze_cmd(
    paths: PathsArg,
    format: FormatOpt = OutputFormat.table,
    steps: StepsOpt = None,
    rules: RulesOpt = None,
    comm_kernel: CommKernelOpt = None,
    like_hta: LikeHtaOpt = False,
    link_gbps: LinkGbpsOpt = None,
    step_pattern: StepPatternOpt = DEFAULT_STEP_PATTERN,
    rank: Annotated[int | None, typer.Option(
        "--rank", min=0, max=MAX_RANK,
        help="Rank of a single trace file that names none (no distributedInfo, no rankN in its name).")
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
             "Ids: " + ", ".join(FINDING_IDS) + ".")] = None,
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
    tables: Annotated[Path | None, typer.Option(
        "--tables", metavar="DIR",
        help="Also write the full detail (per iteration, per collective and rank, stragglers, syncs) as "
             "Parquet tables in DIR, readable with pandas or DuckDB; the JSON document stays compact.")] = None,
    ranks: Annotated[str | None, typer.Option(
        "--ranks", metavar="LIST",
        help="Analyze only these ranks, e.g. 0-7,512,1023; the notes name asked-for ranks no file holds, "
             "and the cross-rank figures cover only the ranks given.")] = None,
) -> None:
    """Measure comm/compute overlap per rank, stream and iteration.

    The answer is kept in the report cache: the same command on unchanged files prints it again
    without analyzing (--no-cache recomputes).
    """
    threshold = gate_threshold(fail_under_overlap) if fail_under_overlap is not None else None
    fail_ids = check_finding_ids(fail_on or [], no_diagnose)
    resolved_scheduler(scheduler)  # checked even where the report cache answers
    # Keyed by the options as given: a --steps text that does not parse never made an entry, so it
    # still fails below, with the usage error.
    key = None if no_cache else report_cache.ReportKey.of(paths, {
        "command": "analyze", "rank": rank, "rules": _file_digest(rules), "comm_kernel": comm_kernel or [],
        "steps": steps, "like_hta": like_hta, "step_pattern": step_pattern, "align": not no_align,
        "diagnose": not no_diagnose, "link_gbps": link_gbps, "ranks": ranks})
    # The cache keeps the JSON document (no pickle): every format is rendered from it, so a hit answers all
    # (--tables needs the report itself, so it analyzes).
    doc, damaged = report_cache.lookup(key) if key is not None and tables is None else (None, None)
    if damaged:
        err_console.print(f"overlapscope: note: {damaged}", markup=False, highlight=False)
    if doc is None:
        # pandas, pyarrow, numpy and what the per-rank workers run (overlapscope/stack_imports.py); the
        # caller's own stages are imported while the workers parse (report.import_caller_stages)
        with analysis_stack_imports():
            from analyzers.report import analyze, import_caller_stages

        options = options_from(steps, like_hta, step_pattern)
        traces = load_set(paths, rank=rank, rules=rules, comm_kernel=comm_kernel, jobs=jobs, cache=not no_cache,
                          scheduler=scheduler, options=options, diagnose=not no_diagnose, host_tables=False,
                          ranks=ranks, meanwhile=lambda: _imported(import_caller_stages))
        from analyzers.crossrank.collective_table import CollectiveParams

        with stage_progress(err_console.is_terminal) as progress:
            report = analyze(traces, options, diagnose=not no_diagnose, align=not no_align, progress=progress,
                             collective_params=CollectiveParams(link_gbps=link_gbps))
        doc = _json_document(report)
        if tables is not None:
            from .write_tables import write_tables

            try:
                write_tables(report, tables)
            except OSError as exc:
                raise UsageFailure(f"--tables {tables}: cannot write ({exc.strerror or exc})") from None
        if key is not None:
            report_cache.put(key, doc)
    emit_document(doc, format, streams=streams)
    if gates_fail(msgspec.json.decode(doc) if threshold is not None or fail_ids else {}, threshold,
                  allow_undefined, fail_ids):
        raise typer.Exit(EXIT_GATE)


def _imported(imports: Callable[[], None]) -> None:
    """Run imports as the analysis stack's are (cyclic GC off, then frozen: stack_imports.py)."""
    with imports_without_gc():
        imports()


def _json_document(report: AnalysisReport) -> bytes:
    """What `-f json` prints (without the final newline), as the cache keeps it."""
    from .render_json import report_json

    return report_json(report)


def _file_digest(path: Path | None) -> str | None:
    """A rules file enters the cache key by its contents (an edited file is a new analysis)."""
    if path is None:
        return None
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return str(path)  # unreadable: load_rules reports it on the (uncached) analysis


def gates_fail(doc: dict[str, Any], threshold: float | None, allow_undefined: bool, fail_ids: list[str]) -> bool:
    """The CI gates, read from the report's JSON document (the same on a fresh analysis and a cache hit).

    Each failing gate is named on stderr; True when any failed.
    """
    failed = False
    if threshold is not None:
        failing = [r for r in doc["ranks"] if r["overlap_ratio"] is not None and r["overlap_ratio"] < threshold]
        if failing:
            detail = ", ".join(f"rank {r['rank']} {pct(r['overlap_ratio'])}" for r in failing)
            err_console.print(f"[red]gate failed:[/red] overlap ratio below {pct(threshold)}: {detail}")
            failed = True
        failed |= undefined_ratio_gate(doc, allow_undefined)
    have = {f["id"] for f in doc.get("findings") or []}
    present = [i for i in fail_ids if i in have]
    if present:
        err_console.print(f"[red]gate failed:[/red] finding(s) present: {', '.join(present)}")
        failed = True
    return failed


def undefined_ratio_gate(doc: dict[str, Any], allow: bool) -> bool:
    """Name on stderr the ranks the overlap gate could not measure; True (gate fails) unless allowed.

    A CI gate that measured nothing must not pass silently: no communication recognised (a custom
    comm kernel no rule knows) or none in the selected steps leaves the ratio undefined.
    """
    undefined = [r for r in doc["ranks"] if r["overlap_ratio"] is None]
    if not undefined:
        return False
    hints = [n for r in undefined for n in r["notes"] if "look like it" in n][:1]
    ranks = ", ".join(str(r["rank"]) for r in undefined)
    verdict = "allowed (--allow-undefined)" if allow else "gate failed"
    colour = "yellow" if allow else "red"
    detail = (f"overlap ratio undefined for rank {ranks}: no communication recognised in the analysed steps, so "
              "--fail-under-overlap measured nothing there"
              + (f" ({hints[0]})" if hints else "; name custom comm kernels with --comm-kernel or --rules"))
    from rich.markup import escape

    err_console.print(f"[{colour}]{verdict}:[/{colour}] {escape(detail)}", highlight=False)
    return not allow


def check_finding_ids(ids: list[str], no_diagnose: bool) -> list[str]:
    """--fail-on ids must be known finding ids, and need the diagnosis."""
    unknown = [i for i in ids if i not in FINDING_IDS]
    if unknown:
        raise UsageFailure(f"--fail-on: unknown finding {', '.join(unknown)} (known: {', '.join(FINDING_IDS)})")
    if ids and no_diagnose:
        raise UsageFailure("--fail-on needs the findings: drop --no-diagnose")
    return ids
