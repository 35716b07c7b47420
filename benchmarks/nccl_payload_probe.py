"""Every common NCCL collective at several message sizes, for recording NCCL's NVTX payloads.

NCCL (2.19 and later) annotates each collective call with an NVTX range whose payload holds the
message size, the communicator and the reduction. Recorded under Nsight Systems and exported to
SQLite, those payloads are what overlapscope reads message sizes from in nsys traces. This script
made tests/data/nccl-nvtx/ (see its README.md):

    torchrun --nproc-per-node 2 --no-python nsys profile -t cuda,nvtx -s none --cpuctxsw=none \\
        -o rank%q{LOCAL_RANK} python3 benchmarks/nccl_payload_probe.py
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

SIZES = (1 << 12, 1 << 18, 1 << 22)  # elements per rank
STEPS = 3


def main() -> None:
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dev = torch.device("cuda", torch.cuda.current_device())
    w = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)
    for step in range(STEPS):
        torch.cuda.nvtx.range_push(f"probe step {step}")
        for n in SIZES:
            x = torch.ones(n, device=dev, dtype=torch.bfloat16)
            dist.all_reduce(x)
            gathered = torch.empty(n * world, device=dev, dtype=torch.bfloat16)
            dist.all_gather_into_tensor(gathered, x)
            part = torch.empty(n // world, device=dev, dtype=torch.bfloat16)
            dist.reduce_scatter_tensor(part, x)
            dist.broadcast(x, src=0)
            y = torch.empty_like(x)
            dist.all_to_all_single(y, x)
            if world > 1:
                if rank == 0:
                    dist.send(x, dst=1)
                elif rank == 1:
                    dist.recv(y, src=0)
            torch.matmul(w, w)  # a compute kernel between the collectives
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
