"""Profiling a few iterations: torch.profiler with CUDA sync events, or NVTX ranges for Nsight Systems.

Every rank drains its GPU and meets the others at a host (gloo) barrier before the first
recorded step, so ProfilerStep#1 starts together on all ranks and no warm-up kernel leaks in.
Under torch.profiler each rank also records PyTorch's Execution Trace of one step beside its trace
(rank{R}.et.json.gz): which tensors each operator read and wrote, from which `overlapscope whatif --et`
reads which compute consumes which collective's output. It is an extra step before the profiled ones,
not one of them: the observer records every operator's arguments, which doubled the host's time per
FSDP step (host-bound: 57 -> 113-118 ms a step, 2xH200), so traced steps would not be the program's.
"""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from runners.context import Ctx
from runners.timing import synchronize


def profile(ctx: Ctx, fn: Callable[[], Any], out_dir: Path) -> str | None:
    """Profile 1 warm-up + profile_steps iterations; returns the trace file name (torch mode)."""
    steps = int(ctx.params["profile_steps"])
    if ctx.profiler == "none" or steps <= 0:
        return None
    dist.barrier(group=ctx.group)
    synchronize(ctx)
    if ctx.profiler == "nsys":
        fn()  # the warm-up step, outside the capture range
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
    _record_execution_trace(ctx, fn, out_dir / f"rank{ctx.rank}.et.json")
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
        fn()  # the profiler's warm-up step (not recorded)
        synchronize(ctx)  # still in warm-up: no kernel of this step may leak into the recording
        dist.barrier(group=ctx.host_group)
        prof.step()  # -> recording; this transition can take a while (seen: 1 s) on one rank only
        dist.barrier(group=ctx.host_group)  # so all ranks start ProfilerStep#1 together (no GPU sync)
        for _ in range(steps):
            fn()
            prof.step()
    synchronize(ctx)
    return name


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
