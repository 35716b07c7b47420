"""CUDA-event timing of iteration callables, interleaved so that every callable sees the same GPU.

The harness's final measurement and the tuned variants' schedule search both time through
here, so a schedule is chosen under the conditions it is later reported under.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from runners.context import Ctx

TIMING_CHUNK = 5  # iterations per timing chunk; kinds alternate between chunks


def synchronize(ctx: Ctx) -> None:
    if ctx.cuda:
        torch.cuda.synchronize(ctx.device)


def time_ms(ctx: Ctx, fn: Callable[[], Any], iters: int) -> list[float]:
    """Per-iteration times in ms: CUDA events on the current stream, back to back.

    Every callable joins its worker streams into the current stream before it
    returns, so an end event covers all of the iteration's GPU work.
    """
    dist.barrier(group=ctx.group)
    synchronize(ctx)
    if ctx.cuda:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        for i in range(iters):
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize(ctx.device)
        return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def time_interleaved(ctx: Ctx, fns: dict[str, Callable[[], Any]], iters: int,
                     chunk: int = TIMING_CHUNK, shuffle: bool = True) -> dict[str, list[float]]:
    """Time several callables in alternating chunks of iterations, in a new order every round.

    A GPU at its power limit lowers its clocks within tens of milliseconds of sustained GEMMs (a
    GEMM alone ran up to ~13 % slower than after idle, benchmarks/gemm_speed_probe.py), so whatever
    is timed last looks slower; alternating small chunks gives every callable the same conditions.
    What ran just before a chunk matters too: at one ag-gemm shape, one fixed order every round
    (the tuned schedule always behind the collective alone) timed it about 6 % slower than a new
    order every round (benchmarks/ag_gemm_probe.py), so each round shuffles the order (`round_order`:
    the same on every rank), and no callable always follows the same other one. `shuffle=False`
    keeps the given order every round (benchmarks compare the two).
    """
    for f in fns.values():  # one untimed call each (allocator, cuBLAS heuristics)
        f()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    done = 0
    while done < iters:
        n = min(chunk, iters - done)
        for k in round_order(list(fns), done // chunk) if shuffle else fns:
            samples[k] += time_ms(ctx, fns[k], n)
        done += n
    return samples


def round_order(keys: list[str], round_index: int) -> list[str]:
    """The order of one round: seeded by the round's index, so every rank times the same callable
    at the same moment (their collectives and symmetric-memory barriers must meet)."""
    order = list(keys)
    random.Random(round_index).shuffle(order)
    return order


def median_and_spread(samples: Sequence[float], chunk: int = TIMING_CHUNK) -> tuple[float, float]:
    """The median of all samples and half the range of the medians of their chunks (nan for one chunk)."""
    chunks = [statistics.median(samples[i:i + chunk]) for i in range(0, len(samples) - chunk + 1, chunk)]
    return statistics.median(samples), (max(chunks) - min(chunks)) / 2 if len(chunks) > 1 else float("nan")


def slowest_rank(ctx: Ctx, samples: dict[str, list[float]]) -> dict[str, tuple[float, float]]:
    """(median, spread) per callable of the rank whose median is the highest: what every rank waits for."""
    mine = {k: median_and_spread(v) for k, v in samples.items()}
    every: list[Any] = [None] * ctx.world
    dist.all_gather_object(every, mine, group=ctx.group)
    return {k: max((r[k] for r in every), key=lambda x: x[0]) for k in mine}


def stats(samples: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples), "n": len(samples)}
