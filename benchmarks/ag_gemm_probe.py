"""ag-gemm at one shape, outside the search: tuned schedules beside `fused-ref` and the GEMM alone.

Times the schedules in SCHEDULES, PyTorch's fused all-gather+matmul (`fused-ref`), the GEMM alone,
and the local rows' GEMM read from ordinary and from symmetric memory, interleaved, 50 iterations
each, three times over (slowest rank's median over the GEMM alone, printed by rank 0); then each of
FINAL, one at a time, in the grid's final company (baseline, fused-ref, the GEMM alone, the
collective alone), first with the kinds in one fixed order every round, then as `runners.grid`
times them (a new order every round), with each rank's medians.

    OUT=out/probe torchrun --standalone --nproc-per-node 2 benchmarks/ag_gemm_probe.py \\
        '{"M": 8192, "K": 32768, "N": 4096, "steps": 8, "dtype": "fp16"}'
"""
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runners import ag_gemm, symm  # noqa: E402
from runners.ag_gemm_tuned import TunedAgGemm  # noqa: E402
from runners.autotune import Schedule  # noqa: E402
from runners.context import init  # noqa: E402
from runners.grid import _slowest, shape_ctx  # noqa: E402
from runners.specs import AG_GEMM  # noqa: E402
from runners.timing import time_interleaved  # noqa: E402

# (transport, chunks, priority, barrier, graph)
SCHEDULES = [("ce", 1, -1, "gate", False), ("ce", 1, -1, "gate", True), ("ce", 1, -1, "none", True),
             ("ce", 2, -1, "gate", True), ("ce", 4, -1, "head", True)]
FINAL = (0, 1, 2, 3)  # indices into SCHEDULES timed in the final company


def main() -> None:
    out = Path(os.environ["OUT"])
    shape = json.loads(sys.argv[1])
    ctx, _ = init(AG_GEMM, ["--variant", "tuned", "--profiler", "none", "--out", str(out)])
    sctx = shape_ctx(ctx, AG_GEMM, shape, {"tune": "off", "iters": 50, "profile_steps": 3})
    wl = ag_gemm.build(sctx, ["baseline", "tuned", "fused-ref"])
    tuned = TunedAgGemm(wl)
    scheds = [Schedule(*s) for s in SCHEDULES]
    fns = {s.name: tuned.build(s) for s in scheds}
    fns["fused-ref"] = wl.variant_fn("fused-ref")
    fns["gemm"] = wl.compute_fn("tuned")
    rows = wl.M // wl.D
    local = wl.a_local.view(rows, wl.K)
    _, sym, _ = symm.scratch(sctx, (rows, wl.K), "ag-gemm A")
    sym.copy_(local)
    c = torch.empty(rows, wl.N, device=local.device, dtype=local.dtype)
    fns["local rows, ordinary memory"] = lambda: torch.matmul(local, wl.b, out=c)
    fns["local rows, symmetric memory"] = lambda: torch.matmul(sym, wl.b, out=c)
    for rep in range(3):
        res = _slowest(ctx, time_interleaved(sctx, fns, 50))
        if ctx.rank == 0:
            g = res["gemm"][0]
            print(rep, json.dumps({k: round(v[0] / g, 3) for k, v in res.items()}), "gemm ms", round(g, 3))
    for i, order in [(i, o) for o in ("fixed", "shuffled") for i in FINAL]:
        name = scheds[i].name
        final = {name: fns[name], "baseline": wl.variant_fn("baseline"), "fused-ref": wl.variant_fn("fused-ref"),
                 "gemm": wl.compute_fn("tuned"), "comm": wl.comm_fn("tuned")}
        samples = time_interleaved(sctx, final, 50, shuffle=order == "shuffled")
        per_rank: list[Any] = [None] * ctx.world
        dist.all_gather_object(per_rank, {k: round(statistics.median(v), 3) for k, v in samples.items()})
        res = _slowest(ctx, samples)
        if ctx.rank == 0:
            g = res["gemm"][0]
            print("final company", order, json.dumps({k: round(v[0] / g, 3) for k, v in res.items()}),
                  "gemm ms", round(g, 3), "per rank ms", json.dumps(per_rank))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
