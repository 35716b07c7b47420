"""CUDA-graph capture of one iteration of a schedule, replayed instead of re-launching every kernel.

Why: the analysis of the hand-tuned GEMM+reduce-scatter at shapes it lost on found
`launch-bound-gaps` over 69 % of a rank's span: the host launched chunks, copies and barriers
more slowly than the GPU ran them. A replayed graph launches the whole iteration at once.

What can be captured (torch 2.11, NCCL 2.28): GEMMs, copies between symmetric-memory buffers
(copy engine), the symmetric-memory barrier kernels, event waits between streams, sleep
kernels, and NCCL collectives and point-to-point calls on a communicator created before the
capture (init_process_group(device_id=...) creates it eagerly). What cannot: anything that
synchronizes the host (a CPU wait on a Work, `.item()`), gloo (CPU), and a first NCCL call
(it would create a communicator inside the capture): every schedule runs eagerly before it
is captured. A capture that fails is reported by the tuning search as a skipped candidate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from runners.context import Ctx


def capture(ctx: Ctx, step: Callable[[int], Any], parities: int, warmup: int = 2) -> Callable[[], Any]:
    """Graphs of step(p) for p in range(parities), replayed in turn (double-buffered schedules
    alternate their receive buffers by iteration parity, which a graph freezes: one graph each)."""
    if not ctx.cuda:
        raise RuntimeError("CUDA graphs need CUDA (this run uses gloo on CPU)")
    side = torch.cuda.Stream(device=ctx.device)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # eager runs on a side stream first, as torch.cuda.graph asks
        for _ in range(warmup):
            for p in range(parities):
                step(p)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize(ctx.device)
    graphs: list[torch.cuda.CUDAGraph] = []
    outs: list[Any] = []
    for p in range(parities):
        g = torch.cuda.CUDAGraph()
        # thread_local: the NCCL watchdog thread's event queries must not invalidate the capture
        with torch.cuda.graph(g, capture_error_mode="thread_local"):
            outs.append(step(p))
        graphs.append(g)
    torch.cuda.synchronize(ctx.device)
    turn = [0]

    def replay() -> Any:
        p = turn[0] % parities
        turn[0] += 1
        graphs[p].replay()
        return outs[p]

    replay.graphs = graphs  # type: ignore[attr-defined]  # kept alive with the callable
    return replay
