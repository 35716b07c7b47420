"""Does a prefetching FSDP variant make the host slower, or does the host's speed drift? Alternates them.

The FSDP what-if pairs compare two variants recorded in different launches, and their host times per step
differed by up to 43 %; at the runner's default size (dim 2048) the steps are bound by the host, so that
gap is the step's. This builds the given variants of runners/fsdp.py's model in ONE process and runs one
step of each in turn (A, B, ..., then B, A, ...), so both meet the same host; it prints per rank and
variant the median host time of the forward, of the backward (loss.backward() returning) and of the step,
in phases: a GPU sync after every step, none, under torch.profiler, and again without it after it, with
the share of the CPU stolen by the hypervisor over the phase (/proc/stat).

usage (2 GPUs):  OUT=dir python -m torch.distributed.run --standalone --nproc-per-node 2 \
    benchmarks/fsdp_host_ab.py zero3-no-prefetch,zero3,zero2-no-prefetch,zero2 [--dim 2048 --heads 16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist

from runners.fsdp import Stack, _fully_shard


def build(variant: str, args: argparse.Namespace, device: torch.device) -> tuple[torch.nn.Module, torch.optim.SGD]:
    """The variant's model as runners/fsdp.py builds it (its prefetch switches), with its optimizer."""
    with device:
        torch.manual_seed(1234)
        model = Stack(args.layers, args.dim, args.heads).to(dtype=torch.bfloat16)
    fully_shard, zero3 = _fully_shard(), variant.startswith("zero3")
    for blk in model.blocks:
        fully_shard(blk, reshard_after_forward=zero3)
    fully_shard(model, reshard_after_forward=zero3)
    if variant.endswith("no-prefetch"):
        model._set_unshard_async_op(True)  # type: ignore[operator]
        for mod in [*model.blocks, model]:
            mod.set_modules_to_backward_prefetch([mod])  # type: ignore[operator]
    return model, torch.optim.SGD(model.parameters(), lr=1e-3)


def stolen() -> tuple[int, int]:
    """(steal ticks, all ticks) of the whole machine so far."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return int(fields[8]), sum(int(x) for x in fields[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--dim", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    rank = int(os.environ["RANK"])
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    variants = args.variants.split(",")
    models = {v: build(v, args, device) for v in variants}
    x = torch.randn(args.batch, args.seq, args.dim, device=device, dtype=torch.bfloat16)

    def step(v: str, rec: dict[str, list[tuple[float, float, float]]]) -> None:
        model, opt = models[v]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.profiler.record_function(f"ab: {v}"):
            loss = model(x).float().pow(2).mean()
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            opt.step()
        rec.setdefault(v, []).append(((t1 - t0) * 1e3, (t2 - t1) * 1e3, (time.perf_counter() - t0) * 1e3))

    def phase(name: str, steps: int, sync: bool) -> None:
        rec: dict[str, list[tuple[float, float, float]]] = {}
        s0 = stolen()
        for i in range(steps):
            for v in variants if i % 2 == 0 else variants[::-1]:
                step(v, rec)
                if sync:
                    torch.cuda.synchronize()
        torch.cuda.synchronize()
        s1 = stolen()
        steal = 100 * (s1[0] - s0[0]) / max(1, s1[1] - s0[1])
        for v in variants:
            fwd, bwd, tot = (statistics.median(c) for c in zip(*rec[v], strict=True))
            print(f"rank {rank} {name:12s} {v:18s} forward {fwd:6.2f} backward {bwd:6.2f} step {tot:6.2f} ms "
                  f"(steal {steal:.2f} %)", flush=True)

    for v in variants:
        for _ in range(5):
            step(v, {})
    torch.cuda.synchronize()
    phase("sync", args.steps, True)
    phase("no-sync", args.steps, False)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    config = torch.profiler._ExperimentalConfig(enable_cuda_sync_events=True)  # as runners/profiling.py
    with torch.profiler.profile(activities=activities, experimental_config=config):
        phase("profiled", max(2, args.steps // 3), False)
    phase("after", args.steps, False)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
