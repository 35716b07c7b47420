"""What splitting the gemm-rs GEMM into chunks costs on one GPU (no communication).

The tuned gemm-rs schedule runs the rank's [M, K/D] x [K/D, N] product as S chunk GEMMs
for the peers' rows, then the own rows as addmm_ (beta = 1) into the received partials.
This times, with CUDA events (median of 50, after warm-up, kinds interleaved): the whole
GEMM; the peers' half as S chunks; the own half as one (S-1)/S addmm_ plus one 1/S addmm_;
and the tuned compute sequence as a whole. The difference to the whole GEMM is what the
schedule pays for chunking, before any communication.

usage (GPU host):  python3 benchmarks/gemm_chunks.py [M K_PER_RANK N S]
"""

from __future__ import annotations

import statistics
import sys

import torch


def median_ms(fn, iters: int = 50) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def main(m: int = 16384, kp: int = 8192, n: int = 8192, steps: int = 4) -> None:
    dev, dt = torch.device("cuda"), torch.bfloat16
    a = torch.randn(m, kp, device=dev, dtype=dt)
    b = torch.randn(kp, n, device=dev, dtype=dt) / kp**0.5
    c = torch.empty(m, n, device=dev, dtype=dt)
    half, mc = m // 2, m // (2 * steps)
    peer_rows, own_rows = a[:half], a[half:]
    part = torch.empty(steps, mc, n, device=dev, dtype=dt)
    recv = torch.randn(half, n, device=dev, dtype=dt)

    def whole() -> None:
        torch.matmul(a, b, out=c)

    def peer_chunks() -> None:
        for s in range(steps):
            torch.matmul(peer_rows[s * mc:(s + 1) * mc], b, out=part[s])

    def own_addmm() -> None:
        head = (steps - 1) * mc
        recv[:head].addmm_(own_rows[:head], b)
        recv[head:].addmm_(own_rows[head:], b)

    def own_matmul() -> None:
        torch.matmul(own_rows, b, out=c[:half])

    def tuned_compute() -> None:
        peer_chunks()
        own_addmm()

    kinds = {"whole GEMM": whole, "peer half, S chunks": peer_chunks, "own half, 2 addmm_": own_addmm,
             "own half, one matmul": own_matmul, "tuned compute sequence": tuned_compute}
    res: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(5):  # interleave the kinds (GPU clocks drift as it heats)
        for k, f in kinds.items():
            res[k].append(median_ms(f, 10))
    flops = 2 * m * kp * n
    base = statistics.median(res["whole GEMM"])
    print(f"M={m} K/D={kp} N={n} S={steps} bf16 on {torch.cuda.get_device_name()}")
    for k, v in res.items():
        med = statistics.median(v)
        print(f"  {k:<26} {med:7.3f} ms  (range {min(v):.3f}-{max(v):.3f})  vs whole {med / base:5.3f}"
              + (f"  {flops / med / 1e9:6.0f} TFLOP/s" if k in ("whole GEMM", "tuned compute sequence") else ""))


if __name__ == "__main__":
    main(*[int(x) for x in sys.argv[1:5]])
