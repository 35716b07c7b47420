"""Would one GEMM over the concatenated K beat the operand exchange's two passes? One GPU, no communication.

The gemm-rs operand exchange computes a rank's output block as its own term (K/D) plus each peer's term
added by a second GEMM's epilogue (beta = 1), which reads and writes the block again. With the peers'
operands placed side by side along K (a 2-D copy into a [rows, K] buffer), one GEMM over K does the same
FLOPs and writes the block once. This probe times, interleaved in rounds (the GPU's power state moves):
the GEMM alone as the baseline runs it ([M, K/D] @ [K/D, N]), the two passes, one GEMM over K, the
hybrid (first row chunk in two passes while operands travel, the rest over K), a 2-D copy of the
own A columns by cudaMemcpy2DAsync (copy engine, runners/cuda_copy.py), and half the block over K by rows and by columns
(an output whose rows lie N apart), all for D = 2. Prints one JSON line per shape (µs).

usage: python benchmarks/kcat_probe.py [--rounds 10] [--iters 10]  (shapes: the gemm-rs grid's M K N dtype)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runners.cuda_copy import copy_2d  # noqa: E402

SHAPES = [(32768, 4096, 8192, torch.bfloat16), (8192, 4096, 32768, torch.float16),
          (16384, 8192, 16384, torch.bfloat16)]


def _time(fn, iters: int) -> float:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 1000 / iters


def probe_shape(M: int, K: int, N: int, dt: torch.dtype, rounds: int, iters: int) -> dict:
    """Every kind at one shape, interleaved over `rounds`: medians, ratios to the GEMM alone, ranges."""
    kp, rows = K // 2, M // 2
    a = torch.randn(M, kp, device="cuda", dtype=dt)
    b = torch.randn(kp, N, device="cuda", dtype=dt)
    c_full = torch.empty(M, N, device="cuda", dtype=dt)
    a_cat = torch.randn(rows, K, device="cuda", dtype=dt)
    b_cat = torch.randn(K, N, device="cuda", dtype=dt)
    out = torch.empty(rows, N, device="cuda", dtype=dt)
    half = rows // 2

    def copy2d() -> None:
        copy_2d(a_cat[:, :kp], a[:rows])  # the copy engine, as the kcat schedules place operands

    kinds = {
        "alone": lambda: torch.matmul(a, b, out=c_full),
        "two_pass": lambda: (torch.matmul(a_cat[:, :kp], b_cat[:kp], out=out), out.addmm_(a_cat[:, kp:], b_cat[kp:])),
        "kcat": lambda: torch.matmul(a_cat, b_cat, out=out),
        "hybrid2": lambda: (torch.matmul(a_cat[:half, :kp], b_cat[:kp], out=out[:half]),
                            out[:half].addmm_(a_cat[:half, kp:], b_cat[kp:]),
                            torch.matmul(a_cat[half:], b_cat, out=out[half:])),
        "copy2d_a": copy2d,
        # the same half of the block by rows (contiguous output) and by columns (output rows N apart)
        "half_by_rows": lambda: torch.mm(a_cat[half:], b_cat, out=out[half:]),
        "half_by_cols": lambda: torch.mm(a_cat, b_cat[:, N // 2:], out=out[:, N // 2:]),
        "half_by_cols_addmm": lambda: out[:, N // 2:].addmm_(a_cat[:, kp:], b_cat[kp:, N // 2:]),
    }
    copy2d()
    if not torch.equal(a_cat[:, :kp], a[:rows]):
        raise RuntimeError("the 2-D copy did not place the columns")
    for f in kinds.values():
        f()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(rounds):
        for k, f in kinds.items():
            samples[k].append(_time(f, iters))
    med = {k: round(statistics.median(v), 1) for k, v in samples.items()}
    return {"shape": [M, K, N, str(dt).removeprefix("torch.")], "median_us": med,
            "ratio_to_alone": {k: round(v / med["alone"], 3) for k, v in med.items()},
            "range_us": {k: [round(min(v), 1), round(max(v), 1)] for k, v in samples.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    for M, K, N, dt in SHAPES:
        print(json.dumps(probe_shape(M, K, N, dt, args.rounds, args.iters)))
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
