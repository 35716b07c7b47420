"""What every runner rank does, whatever the algorithm.

One rank process (started by torchrun) runs: init of the process group, the
workload's setup, then for each requested variant: warm-up, a correctness check
against the non-overlapped baseline (the run fails above a dtype bound),
CUDA-event timings (median of many) of the variant, the baseline, the compute
alone and the communication alone, and a profile of a few iterations
(torch.profiler with CUDA sync events, or NVTX ranges + cudaProfilerStart/Stop
for Nsight Systems). Rank 0 writes manifest.json; every rank writes its trace.

Failure handling is file based so that the launcher can name the guilty rank
after torchrun tore everything down: each rank keeps rank{R}.status.json (its
current phase and a progress counter) and, when it raises, rank{R}.error.json.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from runners.context import PREFIX, Ctx, PeerError, StatusFile, init
from runners.profiling import profile
from runners.specs import AlgorithmSpec
from runners.streams import set_nvtx
from runners.timing import TIMING_CHUNK, stats, synchronize, time_interleaved
from runners.workload import REL_ERROR_BOUND, CorrectnessError, Workload

MANIFEST_VERSION = 1

# Environment variables worth recording: they change what the traces show.
ENV_PREFIXES = ("NCCL_", "TORCH_SYMM_MEM", "TORCH_NCCL", "CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_VISIBLE_DEVICES",
                "OMP_NUM_THREADS")


def _versions(ctx: Ctx) -> dict[str, Any]:
    v: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(),
                         "cuda": torch.version.cuda}
    if ctx.cuda:
        with contextlib.suppress(Exception):
            nccl = torch.cuda.nccl.version()
            v["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    if os.environ.get("OVERLAPSCOPE_NSYS_VERSION"):
        v["nsys"] = os.environ["OVERLAPSCOPE_NSYS_VERSION"]
    return v


def _rank_facts(ctx: Ctx) -> dict[str, Any]:
    facts: dict[str, Any] = {"rank": ctx.rank, "local_rank": ctx.local_rank, "host": socket.gethostname(),
                             "pid": os.getpid(), "device": str(ctx.device)}
    if ctx.cuda:
        facts["gpu"] = torch.cuda.get_device_name(ctx.device)
    return facts


# --------------------------------------------------------------------------- one variant


def run_variant(ctx: Ctx, wl: Workload, variant: str, out_dir: Path) -> dict[str, Any]:
    """Warm up, check, time and profile one variant; returns this rank's record."""
    p = ctx.params
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx.status.set("tune", variant)
    wl.prepare(variant)
    fn = wl.variant_fn(variant)
    ctx.status.set("warmup", variant)
    for _ in range(int(p["warmup"])):
        fn()
    synchronize(ctx)

    ctx.status.set("check", variant)
    err = wl.check(variant)
    bound = REL_ERROR_BOUND[ctx.dtype]
    errors: list[float] = [0.0] * ctx.world
    dist.all_gather_object(errors, err, group=ctx.group)
    bad = [(r, e) for r, e in enumerate(errors) if not e <= bound]
    ctx.log(f"{variant}: relative error vs baseline {max(errors):.3g} (bound {bound:g})")
    if bad:
        worst = ", ".join(f"rank {r}: {e:.3g}" for r, e in bad)
        msg = f"{ctx.spec.name} {variant}: relative error above {bound:g} ({worst})"
        if any(r == ctx.rank for r, _ in bad):
            raise CorrectnessError(msg)
        raise PeerError(msg)

    ctx.status.set("timing", variant)
    timings = time_interleaved(ctx, {"variant": fn, "baseline": wl.baseline_fn(variant),
                                     "compute_alone": wl.compute_fn(variant), "comm_alone": wl.comm_fn(variant)},
                               int(p["iters"]))
    med = {k: statistics.median(v) for k, v in timings.items()}
    ctx.log(f"{variant}: {med['variant']:.3f} ms (baseline {med['baseline']:.3f}, compute alone "
            f"{med['compute_alone']:.3f}, comm alone {med['comm_alone']:.3f})")

    ctx.status.set("profile", variant)
    settled: dict[str, Any] = {}
    trace = profile(ctx, fn, out_dir, settled)
    return {**_rank_facts(ctx), "rel_error": err, "trace": trace, "profile_state": settled,
            "timings_ms": {k: {**stats(v), "samples": [round(x, 5) for x in v]} for k, v in timings.items()}}


def _summary(records: list[dict[str, Any]]) -> dict[str, float]:
    """Run-level figures: per kind, the slowest rank's median (the step waits for it)."""
    kinds = records[0]["timings_ms"].keys()
    return {f"{k}_ms": max(r["timings_ms"][k]["median"] for r in records) for k in kinds}


def write_manifest(ctx: Ctx, wl: Workload, variant: str, out_dir: Path, records: list[dict[str, Any]],
                   argv: Sequence[str]) -> None:
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "tool": "overlapscope runners",
        "status": "ok",
        "algorithm": ctx.spec.name,
        "variant": variant,
        "variant_help": ctx.spec.variants[variant],
        "profiler": ctx.profiler,
        "params": ctx.params,
        "world_size": ctx.world,
        "backend": ctx.backend,
        "dtype": str(ctx.dtype).removeprefix("torch."),
        "command": [sys.executable, "-m", "torch.distributed.run",
                    "--nproc-per-node", os.environ.get("LOCAL_WORLD_SIZE", str(ctx.world)),
                    "-m", ctx.spec.module, *argv],
        "hosts": sorted({r["host"] for r in records}),
        "gpus": [r.get("gpu") for r in records if r.get("gpu")],
        "versions": _versions(ctx),
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
        "rel_error_bound": REL_ERROR_BOUND[ctx.dtype],
        "timings_ms": _summary(records),
        "timing_chunk": TIMING_CHUNK,
        "timing_method": ("CUDA events around each iteration, back to back on the current stream, in chunks of "
                          f"{TIMING_CHUNK} alternating variant/baseline/compute/comm; median of iters per rank, "
                          "then the slowest rank" if ctx.cuda else
                          "host perf_counter per iteration (CPU/gloo: correctness runs, not performance)"),
        "traces": {str(r["rank"]): r["trace"] for r in records if r["trace"]},
        "workload": wl.describe(variant),
        "tuning": wl.tuning(variant),
        "notes": ctx.notes,
        "ranks": records,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1, default=str))


def _write_error(out: Path, rank: int, status: StatusFile | None, exc: BaseException) -> None:
    err = {"rank": rank, "phase": status.phase if status else "start", "variant": status.variant if status else "",
           "type": type(exc).__name__, "message": str(exc), "time": time.time(),
           "traceback": traceback.format_exc()}
    with contextlib.suppress(OSError):
        out.mkdir(parents=True, exist_ok=True)
        (out / f"rank{rank}.error.json").write_text(json.dumps(err, indent=1))


def _all_past_the_barrier(ctx: Ctx, timeout_s: float = 60.0) -> None:
    """Wait, through the rendezvous store, until every rank has returned from the final barrier.

    A gloo barrier can return on one rank while a peer is still reading its last message; the first
    rank then tears its sockets down and the peer's gloo thread throws on the closed connection,
    which aborts the process (a rare SIGABRT "after phase 'done'" seen in CI on 3-rank CPU runs).
    The store is served by torchrun's agent, so it outlives every rank's sockets. Best effort: a
    store that cannot be reached (not under torchrun) or a peer that never comes ends the wait.
    """
    try:
        store = dist.distributed_c10d._get_default_store()
        key = "overlapscope/past-final-barrier"
        store.add(key, 1)
        deadline = time.monotonic() + timeout_s
        while store.add(key, 0) < ctx.world and time.monotonic() < deadline:
            time.sleep(0.005)
    except (AttributeError, RuntimeError, ValueError):
        pass


def main(spec: AlgorithmSpec, build: Callable[[Ctx, list[str]], Workload],
         argv: Sequence[str] | None = None) -> None:
    """Entry point of a runner module (one rank)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    rank = int(os.environ.get("RANK", "0"))
    out_guess = Path(argv[argv.index("--out") + 1]) if "--out" in argv[:-1] else Path(".")
    ctx: Ctx | None = None
    try:
        ctx, variants = init(spec, argv)
        set_nvtx(ctx.profiler == "nsys")  # region() then also marks NVTX ranges for Nsight Systems
        ctx.status.set("setup")
        wl = build(ctx, variants)
        for variant in variants:
            out_dir = ctx.out if len(variants) == 1 else ctx.out / variant
            record = run_variant(ctx, wl, variant, out_dir)
            records: list[Any] = [None] * ctx.world
            dist.all_gather_object(records, record, group=ctx.group)
            if ctx.rank == 0:
                write_manifest(ctx, wl, variant, out_dir, records, argv)
        ctx.status.set("done")
        dist.barrier(group=ctx.group)
        _all_past_the_barrier(ctx)
        ctx.status.set("finished")
        dist.destroy_process_group()
        ctx.status.set("exit")
    except BaseException as exc:
        if not isinstance(exc, SystemExit | KeyboardInterrupt):
            _write_error(ctx.out if ctx else out_guess, rank, ctx.status if ctx else None, exc)
            print(f"{PREFIX} rank {rank} FAILED in phase "
                  f"{ctx.status.phase if ctx else 'start'}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        raise
