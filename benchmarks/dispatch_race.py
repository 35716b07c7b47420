"""Count, per traced step of the tuned ag-gemm, whether the comm stream's barrier kernel was
dispatched before the local GEMM or only at the GEMM's tail (benchmarks/RESULTS.md).

The local GEMM is the step's first GEMM (`coopB` nvjet kernel on 2×H200; `--gemm` picks
another name); a barrier starting more than `--late-us` after it is counted as late, and
more than the GEMM's own duration after it as host-bound (the GEMM finished first). The
first traced step follows the profiler start and is left out.

usage: python benchmarks/dispatch_race.py RUN_DIR [RUN_DIR ...]   (each holds rank*.json.gz)
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np

from analyzers.io.load import load_traces


def classify_steps(run_dir: Path, gemm: str, barrier: str, late_us: float) -> Counter[str]:
    counts: Counter[str] = Counter()
    for trace in load_traces([run_dir]).ranks.values():
        gpu = trace.gpu.sort_values("start_ns")
        names = trace.names_of(gpu["name_id"].to_numpy())
        gemms = gpu[np.char.find(names.astype(str), gemm) >= 0]
        barriers = gpu[np.char.find(names.astype(str), barrier) >= 0]
        for start in barriers["start_ns"].to_numpy()[1:]:
            before = gemms[gemms["start_ns"] <= start + 50_000]
            if before.empty:
                continue
            g = before.iloc[-1]
            lag_us = (start - g["start_ns"]) / 1e3
            if lag_us > (g["end_ns"] - g["start_ns"]) / 1e3:
                counts["host-bound"] += 1
            elif lag_us > late_us:
                counts["late"] += 1
            else:
                counts["first"] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--gemm", default="coopB", help="substring naming the local GEMM kernel")
    parser.add_argument("--barrier", default="barrier_kernel", help="substring naming the barrier kernel")
    parser.add_argument("--late-us", type=float, default=5.0, help="later than this after the GEMM = late")
    args = parser.parse_args()
    total: Counter[str] = Counter()
    for run in args.runs:
        c = classify_steps(run, args.gemm, args.barrier, args.late_us)
        total += c
        print(f"{run}: first {c['first']}, late {c['late']}, host-bound {c['host-bound']}")
    print(f"all: steps {sum(total.values())}, first {total['first']}, late {total['late']}, "
          f"host-bound {total['host-bound']}")


if __name__ == "__main__":
    main()
