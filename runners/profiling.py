"""Profiling a few iterations: torch.profiler with CUDA sync events, or NVTX ranges for Nsight Systems.

Every rank drains its GPU and meets the others at a host (gloo) barrier before the first
recorded step, so ProfilerStep#1 starts together on all ranks and no warm-up kernel leaks in.
Under torch.profiler each rank also records PyTorch's Execution Trace of one step beside its trace
(rank{R}.et.json.gz): which tensors each operator read and wrote, from which `overlapscope whatif --et`
reads which compute consumes which collective's output. It is an extra step before the profiled ones,
not one of them: the observer records every operator's arguments, which doubled the host's time per
FSDP step (host-bound: 57 -> 113-118 ms a step, 2xH200), so traced steps would not be the program's.

Every variant is profiled in the same GPU state: the steady one of a GPU at its power limit. A GPU that
idled runs its GEMMs faster for a while (up to ~13 %, benchmarks/gemm_speed_probe.py), so a variant
profiled after a pause (the process's first profiler start, the Execution Trace's slow step) ran faster
than the next one: the symm-mem two-stream set's GEMMs ran 9-17 % faster alone than two-stream-sleep's,
profiled seconds later in the same launch. So the profiler is started once per process before any
variant, the Execution Trace step comes first, and then the variant runs back to back (`settle`) until
its GPU time per iteration is steady, straight into the profiler's warm-up step.
"""

from __future__ import annotations

import gzip
import math
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from runners.context import Ctx
from runners.timing import synchronize

SETTLE_MIN_MS = 1000.0  # GPU time run back to back before a profile, at least (the power state settles in ~100 ms)
SETTLE_MAX_MS = 5000.0  # and at most, steady or not
SETTLE_BATCH_MS = 200.0  # one batch of iterations, timed per iteration; batches are compared
SETTLE_TOLERANCE = 0.02  # steady: a batch's median within 2 % of the batch before on every rank
WARMUP_MS = 50.0  # the profiler's warm-up step runs this much GPU time (at least 1 iteration): it follows the
#                  profiler's start, a pause after the settling

_profiler_started = False


def profile(ctx: Ctx, fn: Callable[[], Any], out_dir: Path, state: dict[str, Any] | None = None) -> str | None:
    """Profile 1 warm-up + profile_steps iterations; returns the trace file name (torch mode). `state` receives
    what `settle` did (the GPU state the profiled steps start in)."""
    steps = int(ctx.params["profile_steps"])
    if ctx.profiler == "none" or steps <= 0:
        return None
    dist.barrier(group=ctx.group)
    synchronize(ctx)
    if ctx.profiler == "torch":
        _start_profiler_once(ctx)
        _record_execution_trace(ctx, fn, out_dir / f"rank{ctx.rank}.et.json")
    facts = settle(ctx, fn)
    last = facts.get("settle_batch_medians_ms", [0.0])[-1]
    warmup = max(1, min(200, math.ceil(WARMUP_MS / last))) if last > 0 else 1
    facts["warmup_iters"] = warmup
    if state is not None:
        state.update(facts)
    settled_at = time.perf_counter()
    if ctx.profiler == "nsys":
        if state is not None:
            state["idle_before_warmup_ms"] = round((time.perf_counter() - settled_at) * 1e3, 3)
        for _ in range(warmup):  # the warm-up step, outside the capture range
            fn()
        synchronize(ctx)  # nothing in flight when the capture starts
        dist.barrier(group=ctx.host_group)
        torch.cuda.profiler.start()
        dist.barrier(group=ctx.host_group)  # capture start can take a while on one rank: start steps together
        for i in range(steps):
            torch.cuda.nvtx.range_push(f"ProfilerStep#{i + 1}")
            fn()
            torch.cuda.nvtx.range_pop()
        synchronize(ctx)
        torch.cuda.profiler.stop()
        return None
    name = f"rank{ctx.rank}.json.gz"
    activities = [torch.profiler.ProfilerActivity.CPU]
    if ctx.cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    config = torch.profiler._ExperimentalConfig(enable_cuda_sync_events=True)
    with torch.profiler.profile(
        activities=activities,
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=steps, repeat=1),
        experimental_config=config,
        on_trace_ready=lambda p: p.export_chrome_trace(str(out_dir / name)),
    ) as prof:
        if state is not None:
            state["idle_before_warmup_ms"] = round((time.perf_counter() - settled_at) * 1e3, 3)
        for _ in range(warmup):  # the profiler's warm-up step (not recorded)
            fn()
        synchronize(ctx)  # still in warm-up: no kernel of this step may leak into the recording
        idle_from = time.perf_counter()
        dist.barrier(group=ctx.host_group)
        prof.step()  # -> recording; this transition can take a while (seen: 1 s) on one rank only
        dist.barrier(group=ctx.host_group)  # so all ranks start ProfilerStep#1 together (no GPU sync)
        if state is not None:  # the GPU idles from the warm-up's end to the first recorded step
            state["idle_before_step1_ms"] = round((time.perf_counter() - idle_from) * 1e3, 3)
        for _ in range(steps):
            fn()
            prof.step()
    synchronize(ctx)
    return name


def _start_profiler_once(ctx: Ctx) -> None:
    """Start and stop torch.profiler once per process with nothing in it: its first start initializes CUPTI (seen
    taking up to 1 s), an idle pause only the first profiled variant of a launch would otherwise get."""
    global _profiler_started
    if _profiler_started:
        return
    activities = [torch.profiler.ProfilerActivity.CPU]
    if ctx.cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities):
        pass
    _profiler_started = True
    dist.barrier(group=ctx.host_group)


def settle(ctx: Ctx, fn: Callable[[], Any]) -> dict[str, Any]:
    """Run `fn` back to back, in batches timed per iteration by CUDA events, until its GPU time per iteration
    is steady (a batch's median within SETTLE_TOLERANCE of the batch before, on every rank) after at least
    SETTLE_MIN_MS, at most SETTLE_MAX_MS. Returns the batches' medians (ms) and why it stopped. Every rank runs
    the same number of iterations: the batch size and the stop are agreed by an all-reduce."""
    if not ctx.cuda:
        return {}
    medians: list[float] = []
    elapsed, batch, steady = 0.0, 2, False
    while True:
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(batch)]
        for a, b in ev:
            a.record()
            fn()
            b.record()
        torch.cuda.synchronize(ctx.device)
        times = sorted(a.elapsed_time(b) for a, b in ev)
        med, elapsed = times[len(times) // 2], elapsed + sum(times)
        steady_here = bool(medians) and abs(med - medians[-1]) <= SETTLE_TOLERANCE * medians[-1]
        medians.append(med)
        # agree: the slowest rank's median sets the batch size; stop only when every rank is steady
        agree = torch.tensor([med, 0.0 if steady_here else 1.0, elapsed], device=ctx.device, dtype=torch.float64)
        dist.all_reduce(agree, op=dist.ReduceOp.MAX, group=ctx.group)
        slowest, unsteady, longest = agree.tolist()
        steady = unsteady == 0.0
        if (steady and longest >= SETTLE_MIN_MS) or longest >= SETTLE_MAX_MS:
            break
        batch = max(2, min(500, math.ceil(SETTLE_BATCH_MS / max(slowest, 1e-3))))
    return {"settle_batch_medians_ms": [round(m, 4) for m in medians], "settle_ms": round(elapsed, 1),
            "settle_steady": steady}


def _record_execution_trace(ctx: Ctx, fn: Callable[[], Any], path: Path) -> None:
    """One step under the Execution Trace observer, written to PATH.gz; a log line where this torch cannot
    record one (the Kineto trace is what the run is for)."""
    try:
        et = torch.profiler.ExecutionTraceObserver().register_callback(str(path))
    except (RuntimeError, AttributeError, OSError) as exc:
        ctx.log(f"no Execution Trace recorded ({type(exc).__name__}: {exc})")
        return
    synchronize(ctx)
    et.start()
    fn()
    synchronize(ctx)
    et.stop()
    et.unregister_callback()
    _gzip_beside(path)


def _gzip_beside(path: Path) -> None:
    """PATH -> PATH.gz (an Execution Trace is mostly repeated keys: a tenth of the bytes), PATH removed."""
    if not path.exists():
        return
    with path.open("rb") as src, gzip.open(path.with_name(path.name + ".gz"), "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()
