"""Is one GEMM's speed a property of the GPU, of its buffers, or of the moment? Times it alone.

The what-if pairs and the runner grid both compare a GEMM's duration between two runs; when the
same kernel on the same GPU takes 700 µs in one run and 795 µs in the next, no prediction from one
run can match the other. This probe times one GEMM shape on one GPU for several freshly allocated
buffer sets (A, B and the output at new addresses, new random values), each timed in rounds spread
over time, and prints per buffer set the median and range of its per-round medians (µs), with
the GPU's SM clock read before and after. A spread across buffer sets far beyond the spread across
rounds says the buffers matter; the reverse says the moment does.

usage: python benchmarks/gemm_speed_probe.py M K N [--dtype bf16] [--sets 8] [--rounds 5] [--iters 20] [--device 0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess

import torch


def _sm_clock(device: int) -> str:
    """The SM clock and power draw nvidia-smi reports now (a string; empty when unavailable)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "-i", str(device), "--query-gpu=clocks.sm,power.draw,temperature.gpu",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip()


def _time(fn, iters: int) -> float:
    """Median of `iters` CUDA-event-timed calls, µs."""
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) * 1000 for a, b in ev)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("M", type=int)
    ap.add_argument("K", type=int)
    ap.add_argument("N", type=int)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--sets", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--device", type=int, default=0)
    args = ap.parse_args()
    torch.cuda.set_device(args.device)
    dt = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    keep = []  # earlier sets stay allocated, so each new set lands at new addresses
    sets = []
    for _ in range(args.sets):
        a = torch.randn(args.M, args.K, device="cuda", dtype=dt)
        b = torch.randn(args.K, args.N, device="cuda", dtype=dt)
        c = torch.empty(args.M, args.N, device="cuda", dtype=dt)
        sets.append((a, b, c))
        keep.append(torch.empty(int(torch.randint(1, 64, ()).item()) << 20, device="cuda", dtype=torch.uint8))
    for a, b, c in sets:  # warm-up
        for _ in range(5):
            torch.mm(a, b, out=c)
    clock_before = _sm_clock(args.device)
    per_set: list[list[float]] = [[] for _ in sets]
    for _ in range(args.rounds):
        for i, (a, b, c) in enumerate(sets):
            per_set[i].append(_time(lambda a=a, b=b, c=c: torch.mm(a, b, out=c), args.iters))
    clock_after = _sm_clock(args.device)
    rows = [{"set": i, "a_addr_mod_2MiB": sets[i][0].data_ptr() % (2 << 20),
             "median_us": round(statistics.median(v), 1), "min_us": round(min(v), 1), "max_us": round(max(v), 1),
             "rounds_us": [round(x, 1) for x in v]} for i, v in enumerate(per_set)]
    meds = [r["median_us"] for r in rows]
    print(json.dumps({"gpu": torch.cuda.get_device_name(args.device), "device": args.device,
                      "shape": [args.M, args.K, args.N], "dtype": args.dtype,
                      "clock_before": clock_before, "clock_after": clock_after,
                      "across_sets_us": [min(meds), max(meds)], "sets": rows}))


if __name__ == "__main__":
    main()
