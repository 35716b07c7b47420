"""Does the GEMM's tail explain the ag-gemm what-if pairs' errors? Measures it and replays with it.

A persistent GEMM's blocks (one per SM) work through its output tiles in rounds; where the last round is
partial, the SMs whose blocks have no tile left are free one round before the kernel's end, and a kernel
that could not fit beside the GEMM starts then. docs/whatif.md ("The tail of the GEMM") derives that round
for the ag-gemm step GEMM (4096 × 8192 output, 256 × 128 tiles, 132 blocks: 8 rounds, the last of 100 tiles)
as an eighth of the GEMM; the traces do not hold the GEMM's shape, so the replay cannot. This prints, per
recording of the ag-gemm pairs:

- the fixed run's tails: for each kernel of another stream that started inside a GEMM and ended after it,
  the GEMM's end minus its start (µs), with the GEMM's duration: what the eighth is checked against;
- the pair's prediction as `whatif` gives it, and with every GPU-filling kernel's tail set to an eighth of
  its own duration (the SM-residency gates then release there): whether knowing the tail would move it.

usage: python benchmarks/gemm_tail_probe.py [--rounds 8]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzers.graph.analysis import GraphRun, whatif  # noqa: E402
from analyzers.graph.fixes import parse_fix  # noqa: E402
from analyzers.graph.rank_graph import CAT_CODES  # noqa: E402
from analyzers.graph.residency import residency  # noqa: E402
from analyzers.io.load import load_traces  # noqa: E402
from analyzers.report import analyze  # noqa: E402

SECOND = "benchmarks/recordings/ag-gemm-second"
# (unfixed set, fix, fixed set)
PAIRS = [
    ("sample_traces/ag-gemm/host-sync", "host-syncs", "sample_traces/ag-gemm/sync-before-loop"),
    ("sample_traces/ag-gemm/sync-in-loop", "serialized-streams", "sample_traces/ag-gemm/sync-before-loop"),
    ("sample_traces/ag-gemm-nsys/sync-in-loop", "serialized-streams", "sample_traces/ag-gemm-nsys/sync-before-loop"),
    (f"{SECOND}/ag-gemm/host-sync", "host-syncs", f"{SECOND}/ag-gemm/sync-before-loop"),
    (f"{SECOND}/ag-gemm/sync-in-loop", "serialized-streams", f"{SECOND}/ag-gemm/sync-before-loop"),
]


def fixed_run_tails(sg) -> list[tuple[float, float]]:
    """(tail µs, GEMM µs) for each kernel of another stream that started inside a compute kernel of its rank
    and ended after it."""
    stream = np.concatenate([sg.graphs[r].stream for r in sg.ranks])
    comp = np.flatnonzero(sg.cat == CAT_CODES["compute"])
    out = []
    for x in range(sg.n):
        inside = comp[(sg.rank_of[comp] == sg.rank_of[x]) & (stream[comp] != stream[x])
                      & (sg.start[comp] < sg.start[x]) & (sg.start[x] < sg.end[comp]) & (sg.end[comp] < sg.end[x])]
        out += [((sg.end[k] - sg.start[x]) / 1e3, (sg.end[k] - sg.start[k]) / 1e3) for k in inside.tolist()]
    return out


def _against(predicted: int, fixed: int) -> str:
    return f"{predicted / 1e6:.3f} ms ({100 * (predicted - fixed) / fixed:+.1f} %)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8, help="tile rounds of the GEMM: its tail is 1/rounds of it")
    args = ap.parse_args()
    print("| unfixed set | fix | fixed run: tails (µs) / GEMM (µs) | fixed measured | predicted | "
          f"predicted, tail = GEMM / {args.rounds} |")
    print("|---|---|---|---|---|---|")
    for a, fix, b in PAIRS:
        fixed = analyze(load_traces([ROOT / b]))
        tails = fixed_run_tails(fixed.graph_run.sg)
        lo, hi = (min(t for t, _ in tails), max(t for t, _ in tails)) if tails else (0.0, 0.0)
        glo, ghi = (min(g for _, g in tails), max(g for _, g in tails)) if tails else (0.0, 0.0)
        fixed_ns = fixed.critical_path["fidelity"]["measured_step_ns"]  # the step as whatif_pairs reads it
        sg = analyze(load_traces([ROOT / a])).graph_run.sg
        plain = whatif(GraphRun(sg), [parse_fix(fix)])["predicted_step_ns"]
        rs = residency(sg)
        rs.tail = np.where(rs.holder, (sg.end - sg.start) // args.rounds, rs.tail)
        tailed = whatif(GraphRun(sg), [parse_fix(fix)])["predicted_step_ns"]
        print(f"| {a} | {fix} | {lo:.0f}-{hi:.0f} / {glo:.0f}-{ghi:.0f} ({len(tails)}) | {fixed_ns / 1e6:.3f} ms | "
              f"{_against(plain, fixed_ns)} | {_against(tailed, fixed_ns)} |")


if __name__ == "__main__":
    main()
