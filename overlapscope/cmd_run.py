"""`overlapscope run` and `overlapscope sweep`: run runner variants under torchrun, then analyze.

The runners (runners.launch) start torchrun as a subprocess; torch is imported there, not here,
so this module loads without torch. A failed run exits 4 naming the rank; its partial outputs
stay in --out.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from analyzers.io.discover import is_trace_name

from .common import (
    EXIT_RUN_FAILED,
    OutputFormat,
    UsageFailure,
    check_out_folder,
    emit,
    err_console,
    load_set,
    out_console,
)
from .stack_imports import analysis_stack_imports

if TYPE_CHECKING:  # the analysis stack is imported where it is used (fast `--help`)
    from rich.table import Table

    from analyzers.report import AnalysisReport

PROFILERS = ("torch", "nsys", "none")


def parse_params(items: list[str]) -> dict[str, str]:
    """NAME=VALUE words -> dict (values are converted by the algorithm's parameter specs)."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageFailure(f"parameter {item!r}: write NAME=VALUE, e.g. M=16384")
        out[name.lstrip("-")] = value
    return out


def _launch_module():
    """runners.launch, imported lazily: it pulls in nothing heavy, but keep `analyze` lean."""
    from runners import launch

    return launch


def _check(algo: str, variants: list[str], params: dict[str, str], profiler: str) -> None:
    launch = _launch_module()
    if algo not in launch.ALGORITHMS:
        raise UsageFailure(f"unknown algorithm {algo!r} (known: {', '.join(sorted(launch.ALGORITHMS))})")
    spec = launch.ALGORITHMS[algo]
    unknown = [v for v in variants if v not in spec.variants]
    if unknown:
        raise UsageFailure(f"{algo}: unknown variant {', '.join(unknown)} (known: {', '.join(spec.variants)})")
    try:
        spec.coerce(params)
    except (KeyError, ValueError) as exc:
        raise UsageFailure(str(exc).strip("'\"")) from None
    if profiler not in PROFILERS:
        raise UsageFailure(f"--profiler must be one of {', '.join(PROFILERS)}")


def _progress(line: str) -> None:
    """Runner log lines, dimmed; markup off because the lines hold brackets of their own."""
    if line:
        err_console.print(line, style="dim", highlight=False, markup=False)


def out_folder(out: Path | None, algo: str, what: str) -> Path:
    """--out, or a fresh runs/<algo>-<variant>-<time> folder: the default never lands on an earlier run."""
    return out if out is not None else Path("runs") / f"{algo}-{what}-{time.strftime('%Y%m%d-%H%M%S')}"


def sweep_folders(out: Path, variants: list[str], profiler: str) -> list[tuple[Path, list[str]]]:
    """(folder, variants) of each launch a sweep makes (runners.launch.sweep's layout): one launch for all
    variants, or one per variant in its own sub-folder (nsys, or a single variant)."""
    if profiler == "nsys" or len(variants) == 1:
        return [(out / v, [v]) for v in variants]
    return [(out, variants)]


def prepare_out(folders: list[tuple[Path, list[str]]], overwrite: bool, files: tuple[Path, ...] = ()) -> None:
    """Refuse an --out that already holds a run (exit 2, naming it), or clear that run's files when asked.

    files: single files the command writes besides the launches' folders (a sweep's sweep.json).
    """
    launch = _launch_module()
    for out, _ in folders:
        check_out_folder(out)
    for f in files:
        if f.is_file() and not overwrite:
            raise UsageFailure(f"{f} exists (an earlier sweep); choose another --out or pass --overwrite")
        if f.is_file():
            f.unlink()
    for out, variants in folders:
        if overwrite:
            removed = launch.clear_run(out, variants)
            if removed:
                err_console.print(f"--overwrite: removed {len(removed)} file(s) of the earlier run in {out}",
                                  markup=False, highlight=False)
            continue
        found = launch.run_files(out, variants)
        if found:
            raise UsageFailure(str(launch.OutputExists(out, found)))


def _run_failed(exc: Exception, out: Path) -> typer.Exit:
    err_console.print(f"overlapscope: run failed: {exc} (partial outputs kept in {out})", markup=False,
                      highlight=False)
    return typer.Exit(EXIT_RUN_FAILED)


def _pm(median: float, spread: float) -> str:
    """A median with the spread measured in the same run (chunk medians' half range)."""
    return f"{median:.3f}" if spread != spread else f"{median:.3f} ±{spread:.3f}"


def timings_table(results: dict[str, Any]) -> Table:
    """CUDA-event timings of each variant (medians ± spread), with the standalone compute and comm times."""
    from rich.table import Table

    table = Table(title="timings (CUDA events, median ± half the range of its chunk medians)", title_justify="left",
                  header_style="bold")
    for col in ("variant", "time ms", "baseline ms", "speed-up", "compute alone ms", "comm alone ms",
                "time/compute", "ideal ms", "max rel. error"):
        table.add_column(col, justify="left" if col == "variant" else "right")
    for name, r in results.items():
        t = r.timings
        steps = r.manifest.get("params", {}).get("steps")
        ideal = t.compute_ms + t.comm_ms / steps if steps else None
        err = max((x.get("rel_error", 0.0) for x in r.manifest.get("ranks", [])), default=float("nan"))
        table.add_row(name, _pm(t.variant_ms, t.variant_spread_ms), _pm(t.baseline_ms, t.baseline_spread_ms),
                      f"{t.baseline_ms / t.variant_ms:.2f}x" if t.variant_ms > 0 else "n/a",
                      _pm(t.compute_ms, t.compute_spread_ms), _pm(t.comm_ms, t.comm_spread_ms),
                      f"{t.variant_ms / t.compute_ms:.3f}" if t.compute_ms > 0 else "n/a",
                      f"{ideal:.3f}" if ideal else "n/a", f"{err:.2g}")
    return table


def _analyze_out(out_dir: Path, label: str, cpu: bool = False) -> AnalysisReport | None:
    """The run's analysis, or None when it left no trace (--profiler none).

    CPU (gloo) runs record host activity only: their traces load without GPU activity.
    """
    if not out_dir.is_dir() or not any(p.is_file() and is_trace_name(p) for p in out_dir.iterdir()):
        return None
    with analysis_stack_imports():  # pandas, pyarrow, numpy (overlapscope/stack_imports.py)
        from analyzers.report import analyze

    return analyze(load_set([str(out_dir)], label=label, require_gpu=not cpu))


def _on_cpu(result: Any) -> bool:
    return result.manifest.get("backend") == "gloo"


AlgoArg = Annotated[str, typer.Argument(help="ag-gemm, gemm-rs, symm-mem, fsdp or thunder-fsdp.", show_default=False)]
ParamsArg = Annotated[list[str] | None, typer.Argument(
    help="Algorithm parameters as NAME=VALUE (e.g. M=16384 K=8192 N=8192 steps=4 dtype=bf16); "
         "`overlapscope algorithms` lists them.", show_default=False)]
NprocOpt = Annotated[int, typer.Option("--nproc", min=1, max=1024, help="Processes (GPUs) on this host, one per rank.")]
ProfilerOpt = Annotated[str, typer.Option(
    "--profiler", help="torch (torch.profiler with CUDA sync events), nsys (Nsight Systems, exported to "
                       ".sqlite) or none (timings only).")]
def _finite_seconds(value: float) -> float:
    """NaN passes any range check (every comparison with it is false): refused by name."""
    if not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a number of seconds")
    return value


TimeoutOpt = Annotated[float, typer.Option(
    "--timeout", min=1.0, max=7 * 24 * 3600.0, callback=_finite_seconds,
    help="Seconds before a hanging run is brought down (the hung rank is named).")]
RetuneOpt = Annotated[bool, typer.Option(
    "--retune", help="tuned: search this shape's schedule again and replace the choice cached for this host "
                     "(same as tune=retune); without it a fresh cached choice is reused.")]
OverwriteOpt = Annotated[bool, typer.Option(
    "--overwrite", help="Replace a run already in --out (its manifest, logs, rank files); without it such a "
                        "folder is refused.")]


def run_cmd(
    algo: AlgoArg,
    params: ParamsArg = None,
    variant: Annotated[str, typer.Option("--variant", "-v", help="Schedule variant to run.")] = "baseline",
    nproc: NprocOpt = 2,
    profiler: ProfilerOpt = "torch",
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Output folder: per-rank traces + manifest.json (default: a new "
                            "runs/ALGO-VARIANT-TIME folder).", show_default=False)] = None,
    timeout: TimeoutOpt = 1800.0,
    overwrite: OverwriteOpt = False,
    retune: RetuneOpt = False,
    format: Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format of the analysis.")
                      ] = OutputFormat.table,
) -> None:
    """Run one schedule variant under torchrun and the profiler, then print its overlap analysis.

    Without GPUs the algorithms run with gloo on CPU at small sizes (correctness only).
    For several hosts, start `python -m runners.<algo>` with torchrun or Slurm yourself
    (runners/README.md) and analyze the folder.
    """
    values = with_retune(parse_params(params or []), retune)
    _check(algo, [variant], values, profiler)
    launch = _launch_module()
    out = out_folder(out, algo, variant)
    prepare_out([(out, [variant])], overwrite)
    try:
        result = launch.run(algo, variant, nproc=nproc, profiler=profiler, out=out, params=values,
                            timeout_s=timeout, on_progress=_progress)
    except launch.OutputExists as exc:
        raise UsageFailure(str(exc)) from None
    except launch.RunFailed as exc:
        raise _run_failed(exc, out) from None
    if format is OutputFormat.table:
        out_console.print(timings_table({variant: result}))
    report = _analyze_out(result.out_dir, f"{algo} {variant}", cpu=_on_cpu(result))
    if report is None:
        if format is not OutputFormat.table:
            from analyzers.io.plain import to_json as plain_json

            sys.stdout.write(plain_json({"timings": vars(result.timings)}) + "\n")
        return
    report.extra["timings_ms"] = vars(result.timings)
    emit(report, format)


def sweep_cmd(
    algo: AlgoArg,
    params: ParamsArg = None,
    variants: Annotated[str | None, typer.Option(
        "--variants", help="Comma-separated variants (default: all of the algorithm's).")] = None,
    baseline: Annotated[str | None, typer.Option(
        "--baseline", help="Variant the others of its workload are compared with (default: each workload's "
                           "`baseline` variant, else its first). Variants of different workloads (symm-mem's "
                           "all-gather+matmul and matmul+reduce-scatter) are never compared.")] = None,
    nproc: NprocOpt = 2,
    profiler: ProfilerOpt = "torch",
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Output folder: one sub-folder per variant, and sweep.json (default: a new "
                            "runs/ALGO-sweep-TIME folder).", show_default=False)] = None,
    timeout: TimeoutOpt = 3600.0,
    overwrite: OverwriteOpt = False,
    retune: RetuneOpt = False,
    grid: Annotated[Path | None, typer.Option(
        "--grid", help="JSON file of shapes ({\"ALGO\": [{\"M\": 4096, \"K\": 2048, \"N\": 2048, \"steps\": 2, "
                       "\"dtype\": \"bf16\"}, ...]}): tune, check and time tuned, baseline and fused-ref at every "
                       "shape in one process group, and write OUT/grid.json and OUT/grid.md.",
        show_default=False)] = None,
    format: Annotated[OutputFormat, typer.Option("--format", "-f", help="table, json or md.")
                      ] = OutputFormat.table,
) -> None:
    """Run several variants, then compare them: CUDA-event times (median ± spread within the run) and,
    per workload, every trace metric and speed-up against that workload's own baseline.

    The comparison is also written to OUT/sweep.json (the document `-f json` prints).
    """
    if format is OutputFormat.csv:
        raise UsageFailure("--format: sweep writes table, json or md")
    launch = _launch_module()
    values = with_retune(parse_params(params or []), retune)
    if algo not in launch.ALGORITHMS:
        raise UsageFailure(f"unknown algorithm {algo!r} (known: {', '.join(sorted(launch.ALGORITHMS))})")
    if grid is not None:
        run_grid(algo, grid, values, nproc=nproc, out=out, timeout=timeout, format=format)
        return
    chosen = [v.strip() for v in variants.split(",") if v.strip()] if variants else list(
        launch.ALGORITHMS[algo].variants)
    _check(algo, chosen, values, profiler)
    if baseline is not None and baseline not in chosen:
        raise UsageFailure(f"--baseline {baseline!r} is not among the variants run")
    groups = launch.workload_groups(algo, chosen, baseline)
    out = out_folder(out, algo, "sweep")
    prepare_out(sweep_folders(out, chosen, profiler), overwrite, files=(out / "sweep.json",))
    try:
        results = launch.sweep(algo, chosen, nproc=nproc, profiler=profiler, out=out, params=values,
                               timeout_s=timeout, on_progress=_progress)
    except launch.OutputExists as exc:
        raise UsageFailure(str(exc)) from None
    except launch.RunFailed as exc:
        raise _run_failed(exc, out) from None
    reports = {v: rep for v, r in results.items() if (rep := _analyze_out(r.out_dir, v, cpu=_on_cpu(r))) is not None}
    emit_sweep(results, reports, groups, format, out)


def with_retune(values: dict[str, str], retune: bool) -> dict[str, str]:
    """--retune is tune=retune (and conflicts with another tune=)."""
    if not retune:
        return values
    if values.get("tune", "retune") != "retune":
        raise UsageFailure(f"--retune contradicts tune={values['tune']}")
    return {**values, "tune": "retune"}


def run_grid(algo: str, grid: Path, values: dict[str, str], *, nproc: int, out: Path | None, timeout: float,
             format: OutputFormat) -> None:
    """`sweep ALGO --grid FILE`: every shape's tuned/baseline/fused-ref times, the schedule chosen, the criteria."""
    from analyzers.errors import BadInputError
    from runners.commands import read_grid
    from runners.results import grid_markdown

    launch = _launch_module()
    if algo not in ("gemm-rs", "ag-gemm"):
        raise UsageFailure(f"--grid: {algo} has no tuned variant (gemm-rs and ag-gemm have)")
    extra = set(values) - {"tune", "iters"}
    if extra:
        raise UsageFailure(f"--grid takes the shapes from {grid}; only iters= and --retune apply here, not "
                           + ", ".join(sorted(extra)))
    try:
        read_grid(grid, algo)
    except ValueError as exc:
        raise BadInputError(grid, str(exc).removeprefix(f"{grid}: ")) from None
    out = out_folder(out, algo, "grid")
    if (out / "grid.json").exists():
        raise UsageFailure(f"{out / 'grid.json'} exists (an earlier grid); choose another --out")
    try:
        doc = launch.grid(algo, grid, nproc=nproc, out=out, iters=int(values.get("iters", 30)),
                          retune=values.get("tune") == "retune", timeout_s=timeout, on_progress=_progress)
    except launch.RunFailed as exc:
        raise _run_failed(exc, out) from None
    if format is OutputFormat.json:
        from analyzers.io.plain import to_json as plain_json

        sys.stdout.write(plain_json(doc) + "\n")
        return
    sys.stdout.write(grid_markdown(doc["rows"], f"{doc['world']} x {doc['gpu']}"))


def tuning_lines(tuning: dict[str, dict[str, Any]]) -> list[str]:
    """One line per tuned variant: the schedule it ran and how it was chosen."""
    lines = []
    for variant, rec in tuning.items():
        how = str(rec.get("source", "?"))
        if rec.get("source") == "search":
            n = len((rec.get("rounds_ms") or [{}])[0])
            how += f" of {n} candidates in {rec.get('search_s')} s, cache {rec.get('cache_status')}"
        lines.append(f"{variant}: schedule {rec.get('choice', {}).get('name')} ({how})")
    return lines


def emit_sweep(results: dict[str, Any], reports: dict[str, AnalysisReport],
               groups: list[tuple[str, str, list[str]]], fmt: OutputFormat, out: Path | None = None) -> None:
    """Per workload, trace metrics of its variants against its own baseline (compare_many), with the
    CUDA-event timings; the same document is written to OUT/sweep.json."""
    from analyzers.diff import compare_many
    from analyzers.io.plain import to_json as plain_json

    from .render_diff import print_sweep, sweep_markdown

    tables = []
    for workload, base, members in groups:
        mine = {v: reports[v] for v in members if v in reports}
        tables.append((workload, base, compare_many(mine, base) if base in mine else None))
    timings = {v: vars(r.timings) for v, r in results.items()}
    doc = {"timings_ms": timings,
           "groups": [{"workload": w, "baseline": b, "variants": [] if t is None else t.to_dict(orient="records")}
                      for w, b, t in tables]}
    tuning = {v: r.manifest["tuning"] for v, r in results.items() if r.manifest.get("tuning")}
    if tuning:  # how each tuned variant's schedule was chosen (the manifest's record)
        doc["tuning"] = tuning
    if out is not None and Path(out).is_dir():
        (Path(out) / "sweep.json").write_text(plain_json(doc) + "\n")
    if fmt is OutputFormat.json:
        sys.stdout.write(plain_json(doc) + "\n")
        return
    if fmt is OutputFormat.md:
        sys.stdout.write("".join(f"- {line}\n" for line in tuning_lines(tuning)) + "\n".join(
            f"#### {w} (baseline {b})\n\n{sweep_markdown(t)}" for w, b, t in tables if t is not None) + "\n")
        return
    out_console.print(timings_table(results))
    for line in tuning_lines(tuning):
        out_console.print(line, markup=False, highlight=False)
    for workload, base, table in tables:
        if table is not None:
            print_sweep(table, out_console.console, f"{workload}, baseline {base}")


def algorithms_cmd() -> None:
    """List the runner algorithms, their schedule variants and parameters."""
    launch = _launch_module()
    for name, spec in sorted(launch.ALGORITHMS.items()):
        out_console.print(f"[bold]{name}[/bold] — {spec.summary}")
        for v, text in spec.variants.items():
            cpu = f" [dim](CPU: {spec.cuda_only[v]})[/dim]" if v in spec.cuda_only else ""
            out_console.print(f"  variant [cyan]{v}[/cyan]: {text}{cpu}")
        for p in spec.params:
            out_console.print(f"  {p.name}={p.default} [dim]{p.help}[/dim]")
