"""gemm-rs at one shape, outside the search: output pushes against operand exchange, in two companies.

Times eight tuned schedules (output pushes in 2 and 4 chunks; operand exchange on one and two copy
lanes, eager and as a CUDA graph; one GEMM over the concatenated K after a head of rows or of
columns) and the GEMM alone, interleaved, 50 iterations each, three times over (slowest rank's
median over the GEMM alone, printed by rank 0); then each of FINAL, one at a time, in the grid's
final company (baseline, fused-ref, the GEMM alone, the collective alone), as `runners.grid` times
them.

    OUT=out/probe torchrun --standalone --nproc-per-node 2 benchmarks/gemm_rs_probe.py \\
        '{"M": 32768, "K": 4096, "N": 8192, "steps": 8, "dtype": "bf16"}'
"""
import json
import os
import sys
from pathlib import Path

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runners import gemm_rs  # noqa: E402
from runners.autotune import Schedule  # noqa: E402
from runners.context import init  # noqa: E402
from runners.gemm_rs_tuned import TunedGemmRs  # noqa: E402
from runners.grid import _slowest, shape_ctx  # noqa: E402
from runners.specs import GEMM_RS  # noqa: E402
from runners.timing import time_interleaved  # noqa: E402

# (transport, chunks, priority, barrier, graph, lanes)
SCHEDULES = [("ce", 4, -1, "group", False, 1), ("ce", 2, -1, "group", True, 1), ("ce", 1, -1, "inputs", False, 2),
             ("ce", 1, -1, "inputs", True, 1), ("ce", 4, -1, "kcat", True, 1), ("ce", 2, -1, "kcat", True, 1),
             ("ce", 2, -1, "kcat-n", True, 1), ("ce", 4, -1, "kcat-n", True, 1)]
FINAL = (0, 2, 4, 6)  # indices into SCHEDULES timed in the final company


def main() -> None:
    out = Path(os.environ["OUT"])
    shape = json.loads(sys.argv[1])
    ctx, _ = init(GEMM_RS, ["--variant", "tuned", "--profiler", "none", "--out", str(out)])
    sctx = shape_ctx(ctx, GEMM_RS, shape, {"tune": "off", "iters": 50, "profile_steps": 3})
    wl = gemm_rs.build(sctx, ["baseline", "tuned", "fused-ref"])
    tuned = TunedGemmRs(wl)
    scheds = [Schedule(*s[:5], lanes=s[5]) for s in SCHEDULES]
    fns = {s.name: tuned.build(s) for s in scheds}
    fns["gemm"] = wl.compute_fn("tuned")
    for rep in range(3):
        res = _slowest(ctx, time_interleaved(sctx, fns, 50))
        if ctx.rank == 0:
            g = res["gemm"][0]
            print(rep, json.dumps({k: round(v[0] / g, 3) for k, v in res.items()}), "gemm ms", round(g, 3))
    for i in FINAL:
        name = scheds[i].name
        final = {name: fns[name], "baseline": wl.variant_fn("baseline"), "fused-ref": wl.variant_fn("fused-ref"),
                 "gemm": wl.compute_fn("tuned"), "comm": wl.comm_fn("tuned")}
        res = _slowest(ctx, time_interleaved(sctx, final, 50))
        if ctx.rank == 0:
            g = res["gemm"][0]
            print("final company", json.dumps({k: round(v[0] / g, 3) for k, v in res.items()}), "gemm ms", round(g, 3))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
