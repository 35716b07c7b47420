"""Per-step work against the number of steps: iteration metrics, per-rank findings, the whole `analyze`.

Builds a Kineto rank of N profiler steps (each: a GEMM, an all-reduce beside it, a blocking sync, a
second GEMM; tests/trace_files.Kineto), then times, each repeated, rank_metrics (its per-iteration
table) and detect_rank (every per-rank finding) in this process, and as whole processes the parse
alone (`load_file` of the rank: imports, decode, tables) and `overlapscope analyze SET -f json
--no-cache` (every section, the critical path's walk of every step included), with the size of its
JSON. All must grow linearly with the steps. Prints the load average beside the figures.

usage: python -m benchmarks.bench_many_steps [--steps 5000 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
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


PARSE = "import sys, pathlib; from analyzers.io.load import load_file; load_file(pathlib.Path(sys.argv[1]))"


def _process_s(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds of one whole process and the bytes it wrote to stdout."""
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True).stdout
    return time.perf_counter() - t0, len(out)


def _figure(times: list[float]) -> str:
    return f"{statistics.median(times):.2f} s ({min(times):.2f}-{max(times):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[5000, 20000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.steps:
            folder = Path(tmp) / f"steps{n}"
            folder.mkdir()
            path = build(folder / "rank0.json", n)
            (t,) = load_file(path)
            classify_trace(t, load_rules())
            m_times, f_times = [], []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                m = rank_metrics(t, AnalysisOptions())
                m_times.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                detect_rank(t, m, FindingParams())
                f_times.append(time.perf_counter() - t0)
            p_times, a_times, size = [], [], 0
            for _ in range(args.repeat):
                p_times.append(_process_s([sys.executable, "-c", PARSE, str(path)])[0])
                wall, size = _process_s([sys.executable, "-m", "overlapscope", "analyze", str(folder), "-f", "json",
                                         "--no-cache"])
                a_times.append(wall)
            ratio = [a / p for a, p in zip(a_times, p_times, strict=True)]
            print(f"{n:6d} steps: iteration metrics {_figure(m_times)}, per-rank findings {_figure(f_times)}; "
                  f"parse alone {_figure(p_times)}, analyze {_figure(a_times)} (analyze / parse "
                  f"{statistics.median(ratio):.1f}x, {min(ratio):.1f}-{max(ratio):.1f}), JSON {size / 1e6:.2f} MB; "
                  f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
