"""Profiling a few iterations: torch.profiler with CUDA sync events, or NVTX ranges for Nsight Systems.

Every rank drains its GPU and meets the others at a host (gloo) barrier before the first
recorded step, so ProfilerStep#1 starts together on all ranks and no warm-up kernel leaks in.
"""

from __future__ import annotations

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
