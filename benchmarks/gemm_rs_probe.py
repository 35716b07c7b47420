"""gemm-rs: two tuned schedules at one shape outside the search: output pushes against operand exchange.

Times `ce x2 group`, `ce x1 inputs` (one and two copy lanes, two priorities), the GEMM alone and the
reduce-scatter alone, interleaved, 50 iterations each (slowest rank's median, printed as JSON by
rank 0), then records a torch.profiler trace of the first two schedules under $OUT.

    OUT=out/probe torchrun --standalone --nproc-per-node 2 benchmarks/gemm_rs_probe.py \
        '{"M": 8192, "K": 4096, "N": 32768, "steps": 8, "dtype": "fp16"}'
"""
import dataclasses
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
from runners.profiling import profile  # noqa: E402
from runners.specs import GEMM_RS  # noqa: E402
from runners.timing import time_interleaved  # noqa: E402


def main() -> None:
    out = Path(os.environ["OUT"])
    shape = json.loads(sys.argv[1])
    ctx, _ = init(GEMM_RS, ["--variant", "tuned", "--profiler", "none", "--out", str(out)])
    sctx = shape_ctx(ctx, GEMM_RS, shape, {"tune": "off", "iters": 50, "profile_steps": 3})
    wl = gemm_rs.build(sctx, ["baseline", "tuned", "fused-ref"])
    t = TunedGemmRs(wl)
    scheds = [Schedule(*a, **k) for a, k in [(("ce", 2, -1, "group"), {}), (("ce", 1, -1, "inputs"), {}),
                                                (("ce", 1, -1, "inputs"), {"lanes": 2}), (("ce", 1, 0, "inputs"), {})]]
    fns = {s.name: t.build(s) for s in scheds}
    fns["gemm"] = wl.compute_fn("tuned")
    fns["comm"] = wl.comm_fn("tuned")
    res = _slowest(ctx, time_interleaved(sctx, fns, 50))
    if ctx.rank == 0:
        print(json.dumps({k: round(v[0], 4) for k, v in res.items()}))
    for s in scheds[:2]:
        d = out / (f"m{shape['M']}_" + s.name.replace(" ", "_"))
        d.mkdir(parents=True, exist_ok=True)
        profile(dataclasses.replace(sctx, profiler="torch"), fns[s.name], d)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
