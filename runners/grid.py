"""A shape grid for the tuned variants: search, check and time every shape in one process group.

For each shape of a grid file, on every rank: the tuned variant's schedule is chosen (cache or
search, as in a normal run), checked against the baseline, then `tuned`, `baseline`,
`fused-ref`, the GEMM alone and the communication alone are timed together, interleaved in
chunks (runners/timing.py), the slowest rank's median of each, with the spread of its chunk
medians. One process group serves the whole grid, so a grid of 2 × 13 shapes costs a few
minutes instead of one torchrun start per shape. Rank 0 writes grid.json and grid.md.

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m runners.grid \\
        --grid benchmarks/grids/two_gpus.json --out out/grid [--trace]

Grid file: {"gemm-rs": [{"M": 4096, "K": 2048, "N": 2048, "steps": 2, "dtype": "bf16"}, ...],
"ag-gemm": [...]}. --trace also profiles one CUDA-graph replay of each algorithm's tuned
schedule (tune=off, graph=true) into OUT/trace-ALGO/rank{R}.json.gz.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from runners import ag_gemm, gemm_rs
from runners.commands import read_grid
from runners.context import DTYPES, Ctx, init
from runners.profiling import profile
from runners.results import grid_markdown
from runners.specs import AG_GEMM, GEMM_RS, AlgorithmSpec
from runners.timing import slowest_rank, time_interleaved
from runners.workload import REL_ERROR_BOUND

ALGOS: dict[str, tuple[AlgorithmSpec, Any]] = {"gemm-rs": (GEMM_RS, gemm_rs.build), "ag-gemm": (AG_GEMM, ag_gemm.build)}
KINDS = ("tuned", "baseline", "fused-ref", "gemm", "comm")
TRACE_SHAPE = {"M": 8192, "K": 8192, "N": 8192, "steps": 4, "dtype": "bf16"}


def shape_ctx(ctx: Ctx, spec: AlgorithmSpec, shape: dict[str, Any], extra: dict[str, Any]) -> Ctx:
    """The rank's context with this algorithm's parameters at this shape."""
    params = {**spec.defaults(ctx.cuda), "backend": ctx.backend, **spec.coerce({**shape, **extra})}
    return dataclasses.replace(ctx, spec=spec, params=params, dtype=DTYPES[str(params["dtype"])])


def run_shape(ctx: Ctx, algo: str, shape: dict[str, Any], iters: int, tune: str,
              tune_budget_s: float | None = None) -> dict[str, Any]:
    spec, build = ALGOS[algo]
    extra: dict[str, Any] = {"tune": tune, "iters": iters}
    if tune_budget_s is not None:
        extra["tune_budget_s"] = tune_budget_s
    sctx = shape_ctx(ctx, spec, shape, extra)
    wl = build(sctx, ["baseline", "tuned", "fused-ref"])
    t0 = time.monotonic()
    wl.prepare("tuned")
    tune_s = time.monotonic() - t0
    errs: list[Any] = [None] * ctx.world
    dist.all_gather_object(errs, wl.check("tuned"), group=ctx.group)
    fns = {"tuned": wl.variant_fn("tuned"), "baseline": wl.baseline_fn("tuned"),
           "fused-ref": wl.variant_fn("fused-ref"), "gemm": wl.compute_fn("tuned"), "comm": wl.comm_fn("tuned")}
    for f in fns.values():
        f()
    t = slowest_rank(ctx, time_interleaved(sctx, fns, iters))
    rec = wl.tuning("tuned") or {}
    best_ref = min(t["baseline"][0], t["fused-ref"][0])
    row = {"algo": algo, **shape, **{f"{k}_ms": round(v[0], 4) for k, v in t.items()},
           **{f"{k}_spread_ms": round(v[1], 4) for k, v in t.items()},
           "schedule": rec.get("choice", {}).get("name"), "tuning_source": rec.get("source"),
           "cached_choice": rec.get("cached_choice"), "close_to": rec.get("confirm", {}).get("close_to"),
           "tune_s": round(tune_s, 2), "search_s": rec.get("search_s"),
           "candidates": len(rec.get("rounds_ms", [{}])[0]),
           "skipped": rec.get("skipped", {}), "max_rel_error": max(errs),
           "rel_error_bound": REL_ERROR_BOUND[sctx.dtype],
           "tuned_vs_best_ref": round(t["tuned"][0] / best_ref, 4),
           "tuned_vs_gemm": round(t["tuned"][0] / t["gemm"][0], 4),
           "comm_below_gemm": t["comm"][0] < t["gemm"][0]}
    row["pass"] = bool(row["tuned_vs_best_ref"] <= 1.02 and (not row["comm_below_gemm"] or row["tuned_vs_gemm"] <= 1.08)
                       and max(errs) <= row["rel_error_bound"])
    ctx.log(f"{algo} {shape}: tuned {t['tuned'][0]:.3f} baseline {t['baseline'][0]:.3f} fused-ref "
            f"{t['fused-ref'][0]:.3f} gemm {t['gemm'][0]:.3f} comm {t['comm'][0]:.3f} -> {row['schedule']} "
            f"(tuning {tune_s:.1f} s) {'ok' if row['pass'] else 'MISS'}")
    del wl, fns
    gc.collect()
    if ctx.cuda:
        torch.cuda.empty_cache()
    return row


def trace(ctx: Ctx, algo: str, out: Path) -> None:
    """A torch.profiler trace of the tuned schedule replayed as CUDA graphs (tune=off, graph=true)."""
    spec, build = ALGOS[algo]
    sctx = shape_ctx(ctx, spec, TRACE_SHAPE, {"tune": "off", "graph": True, "profile_steps": 3})
    wl = build(sctx, ["tuned"])
    wl.prepare("tuned")
    (out / f"trace-{algo}").mkdir(parents=True, exist_ok=True)
    fn = wl.variant_fn("tuned")
    for _ in range(3):
        fn()
    profile(dataclasses.replace(sctx, profiler="torch"), fn, out / f"trace-{algo}")
    ctx.log(f"{algo}: graph-replay trace in {out / f'trace-{algo}'} ({wl.tuning('tuned')})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m runners.grid", description=__doc__.splitlines()[0])
    parser.add_argument("--grid", type=Path, required=True, help="JSON file: algorithm -> list of shapes")
    parser.add_argument("--out", type=Path, required=True, help="folder for grid.json, grid.md (and traces)")
    parser.add_argument("--iters", type=int, default=30, help="timed iterations per kind and shape")
    parser.add_argument("--tune", choices=("auto", "retune"), default="auto",
                        help="auto: cached choices where fresh; retune: search every shape again")
    parser.add_argument("--tune-budget-s", type=float, default=None,
                        help="seconds each shape's search may take (cuts rounds, not shapes)")
    parser.add_argument("--trace", action="store_true", help="also record a graph-replay trace per algorithm")
    parser.add_argument("--algos", default="gemm-rs,ag-gemm", help="comma-separated algorithms of the grid to run")
    args = parser.parse_args(argv)
    ctx, _ = init(GEMM_RS, ["--variant", "tuned", "--profiler", "none", "--out", str(args.out)])
    gpu = torch.cuda.get_device_name(ctx.device) if ctx.cuda else "cpu (gloo)"
    ctx.log(f"grid on {ctx.world} x {gpu}")
    rows = []
    for algo in args.algos.split(","):
        for shape in read_grid(args.grid, algo):
            ctx.status.set("timing", f"{algo} {shape}")
            rows.append(run_shape(ctx, algo, shape, args.iters, args.tune, args.tune_budget_s))
            if ctx.rank == 0:  # written after every shape: a run cut short keeps what it measured
                (args.out / "grid.json").write_text(json.dumps({"gpu": gpu, "world": ctx.world, "rows": rows},
                                                               indent=1))
                (args.out / "grid.md").write_text(grid_markdown(rows, f"{ctx.world} x {gpu}"))
    if args.trace and ctx.cuda:
        for algo in args.algos.split(","):
            trace(ctx, algo, args.out)
    ctx.status.set("done")
    dist.barrier(group=ctx.group)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
