"""Checks what-if predictions against real fixes: runner variant pairs in sample_traces that differ by one fix.

For each pair, the fixed variant's step is predicted from the unfixed variant's trace (`whatif`,
median over steps of the slowest rank's step) and compared with the fixed variant's measured step
(the same definition, from its own trace). Prints the Markdown table of docs/whatif.md.

usage: python benchmarks/whatif_pairs.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzers.graph.analysis import whatif  # noqa: E402
from analyzers.graph.fixes import parse_fix  # noqa: E402
from analyzers.io.load import load_traces  # noqa: E402
from analyzers.report import analyze  # noqa: E402

# (unfixed set, fix, fixed set, what differs)
PAIRS = [
    ("ag-gemm/host-sync", "host-syncs", "ag-gemm/sync-before-loop", "a stream.synchronize() per step removed"),
    ("ag-gemm/sync-in-loop", "serialized-streams", "ag-gemm/sync-before-loop", "fork waits hoisted out of the loop"),
    ("ag-gemm-nsys/sync-in-loop", "serialized-streams", "ag-gemm-nsys/sync-before-loop",
     "fork waits hoisted out of the loop (nsys)"),
    ("symm-mem/two-stream", "peer-wait", "symm-mem/two-stream-sleep",
     "cross-rank order enforced by a sleep kernel (which the fix cannot add)"),
]


def measured_and_run(folder: str):
    ts = load_traces([ROOT / "sample_traces" / folder])
    rep = analyze(ts)
    return rep


def main() -> None:
    rows = []
    for a, fix, b, what in PAIRS:
        ra, rb = measured_and_run(a), measured_and_run(b)
        res = whatif(ra.graph_run, [parse_fix(fix)])
        fixed = rb.critical_path["fidelity"]["measured_step_ns"]
        err = (res["predicted_step_ns"] - fixed) / fixed
        rows.append((a, fix, b, what, res["measured_step_ns"], res["replayed_step_ns"], res["predicted_step_ns"],
                     fixed, err))
    print("| unfixed set | fix | fixed set | what differs | unfixed measured | replayed | predicted | "
          "fixed measured | error |")
    print("|---|---|---|---|---|---|---|---|---|")
    for a, fix, b, what, m, r, p, f, e in rows:
        print(f"| {a} | {fix} | {b} | {what} | {m / 1e6:.3f} ms | {r / 1e6:.3f} ms | {p / 1e6:.3f} ms | "
              f"{f / 1e6:.3f} ms | {100 * e:+.1f} % |")
    errs = [abs(r[-1]) for r in rows]
    print(f"\nmedian |error| {100 * float(np.median(errs)):.1f} %, max {100 * max(errs):.1f} %")

if __name__ == "__main__":
    main()
