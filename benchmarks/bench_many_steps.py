"""Per-step work against the number of steps: iteration metrics and per-rank findings of one rank.

Builds a Kineto rank of N profiler steps (each: a GEMM, an all-reduce beside it, a blocking sync, a
second GEMM; tests/trace_files.Kineto), then times, each repeated, rank_metrics (its per-iteration
table) and detect_rank (every per-rank finding). Both must grow linearly with the steps. Prints the
load average beside the figures.

usage: python -m benchmarks.bench_many_steps [--steps 5000 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from analyzers.findings.detect import detect_rank
from analyzers.findings.registry import FindingParams
from analyzers.io.load import load_file
from analyzers.overlap.metrics import AnalysisOptions, rank_metrics
from analyzers.timeline.classify import classify_trace, load_rules
from tests.trace_files import GEMM, NCCL_ALLREDUCE, Kineto


def build(path: Path, steps: int) -> Path:
    k = Kineto(rank=0, world_size=1)
    for s in range(steps):
        b = s * 1000
        k.step(s, b, b + 900)
        k.kernel(b + 100, b + 300, GEMM, launch=b + 50)
        k.kernel(b + 200, b + 400, NCCL_ALLREDUCE, launch=b + 60, stream=8)
        k.call("cudaStreamSynchronize", b + 70, b + 420)
        k.kernel(b + 450, b + 600, GEMM, launch=b + 430)
    return k.write(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[5000, 20000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.steps:
            (t,) = load_file(build(Path(tmp) / f"steps{n}.json", n))
            classify_trace(t, load_rules())
            m_times, f_times = [], []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                m = rank_metrics(t, AnalysisOptions())
                m_times.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                detect_rank(t, m, FindingParams())
                f_times.append(time.perf_counter() - t0)
            print(f"{n:6d} steps: iteration metrics {statistics.median(m_times):.2f} s "
                  f"({min(m_times):.2f}-{max(m_times):.2f}), per-rank findings {statistics.median(f_times):.2f} s "
                  f"({min(f_times):.2f}-{max(f_times):.2f}); load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
