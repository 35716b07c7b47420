"""CUDA-graph capture of one iteration of a schedule, replayed instead of re-launching every kernel.

Why: the analysis of the hand-tuned GEMM+reduce-scatter at shapes it lost on found
`launch-bound-gaps` over 69 % of a rank's span: the host launched chunks, copies and barriers
more slowly than the GPU ran them. A replayed graph launches the whole iteration at once.

What can be captured (torch 2.11, NCCL 2.28): GEMMs, copies between symmetric-memory buffers
(copy engine), the symmetric-memory barrier kernels, event waits between streams, sleep
kernels, and NCCL collectives (reduce_scatter_tensor, all_gather_into_tensor) on a
communicator created before the capture (init_process_group(device_id=...) creates it eagerly;
every schedule also runs eagerly before it is captured). What cannot: NCCL point-to-point
through batch_isend_irecv (seen on 2×H100, torch 2.11: "operation failed due to a previous
error during capture", after which torch's allocator still counts a capture underway and the
process aborts at its next random-number call), so the p2p candidates are eager only; gloo
(CPU); anything that synchronizes the host inside the iteration.
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
