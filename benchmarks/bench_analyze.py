"""Time `overlapscope analyze` against HolisticTraceAnalysis on the same trace, same run.

Each tool runs as its own process (start-up included), alternating A B A B ..., and the
ratio is taken pair by pair so machine drift cancels. Peak memory is the child's max RSS
from the OS (os.wait4). HTA: TraceAnalysis(trace_dir).get_comm_comp_overlap(), its
documented entry point for this figure.

usage: python benchmarks/bench_analyze.py TRACE_DIR [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HTA_SNIPPET = (
    "import logging,sys; logging.disable(logging.WARNING);"
    "from hta.trace_analysis import TraceAnalysis;"
    "print(TraceAnalysis(trace_dir=sys.argv[1]).get_comm_comp_overlap(visualize=False).to_string())"
)


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MiB, stdout) of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"command failed: {' '.join(cmd)}")
    return wall, usage.ru_maxrss / 1024, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace_dir", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--like-hta", action="store_true", help="also pass --like-hta (same figure as HTA)")
    a = ap.parse_args()
    ours = [sys.executable, "-m", "overlapscope", "analyze", str(a.trace_dir), "--format", "csv"]
    if a.like_hta:
        ours.append("--like-hta")
    theirs = [sys.executable, "-c", HTA_SNIPPET, str(a.trace_dir)]
    size = sum(p.stat().st_size for p in a.trace_dir.rglob("*") if p.is_file())
    rows = []
    for i in range(a.runs):
        o = timed(ours)
        h = timed(theirs)
        rows.append((o, h))
        print(f"run {i + 1}: overlapscope {o[0]:.2f} s {o[1]:.0f} MiB | HTA {h[0]:.2f} s {h[1]:.0f} MiB "
              f"| ratio HTA/ours {h[0] / o[0]:.1f}x", flush=True)
    med = statistics.median
    print(f"\nmachine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"input: {a.trace_dir} ({size / 1e6:.0f} MB)")
    print(f"overlapscope: wall median {med(r[0][0] for r in rows):.2f} s, peak RSS median "
          f"{med(r[0][1] for r in rows):.0f} MiB")
    print(f"HTA 0.5.0:    wall median {med(r[1][0] for r in rows):.2f} s, peak RSS median "
          f"{med(r[1][1] for r in rows):.0f} MiB")
    print(f"speed-up (HTA wall / overlapscope wall, per pair) median {med(r[1][0] / r[0][0] for r in rows):.1f}x; "
          f"memory ratio median {med(r[1][1] / r[0][1] for r in rows):.1f}x")
    print("\noverlapscope output (last run):\n" + rows[-1][0][2])
    print("HTA output (last run):\n" + rows[-1][1][2])


if __name__ == "__main__":
    main()
