"""The caller's graph stage taken apart, in CPU seconds, on one set: what each piece of `analyze`'s pricing costs.

usage: python benchmarks/graph_stages.py SET [--rounds 3]

Analyzes SET once (its findings) and builds its graph (report.graph_run), then, each round on a fresh copy of
its set graph (no cache carried over): the unmodified replay (GraphRun), one replay of the same inputs (its
events and CPU seconds per event), the walks of every step's critical path on it, and `analyze`'s critical path section
with every finding's price (pricing.section_and_savings for the findings of analyze on SET) serially, and
with the forked process (the caller's CPU only: the fork's CPU is its own). Also, the first round, the peak of
what the serial section allocates beyond what it starts with (tracemalloc: numpy's arrays and Python's objects).
Printed per round, with the 1-minute load average (CPU seconds too grow on a loaded machine).
"""

from __future__ import annotations

import argparse
import copy
import os
import time
import tracemalloc

from overlapscope.stack_imports import analysis_stack_imports


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("set")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with analysis_stack_imports():
        from analyzers.graph import pricing
        from analyzers.graph.analysis import GraphRun, _walk
        from analyzers.graph.replay import _static, _visits, replay
        from analyzers.graph.steps import step_records
        from analyzers.report import analyze, graph_run
        from overlapscope.common import load_set
    traces = load_set([a.set])
    ids = analyze(traces).finding_ids()
    sg0 = graph_run(traces).sg
    print(f"{a.set}: {len(sg0.ranks)} ranks, {sg0.n} activities, {len(sg0.sync_end)} syncs; findings {ids}")

    def fresh():
        sg = copy.copy(sg0)
        for k in [k for k in sg.__dict__ if k.startswith("_")]:
            del sg.__dict__[k]
        return sg

    for i in range(a.rounds):
        cpu = time.process_time
        c = cpu()
        run = GraphRun(fresh())
        base = cpu() - c
        vs = _visits(run.sg, run.inputs, _static(run.sg, run.order), True)
        c = cpu()
        replay(run.sg, run.inputs, run.order)
        one = cpu() - c
        c = cpu()
        for row in step_records(run.replayed[["rank", "step", "t0", "t1", "dur_ns", "last_node", "ends_at_end"]]):
            _walk(run, row)
        walks = cpu() - c
        again = GraphRun(run.sg)
        c = cpu()
        pricing.section_and_savings(again, ids, False)
        serial = cpu() - c
        again = GraphRun(run.sg)
        c = cpu()
        pricing.section_and_savings(again, ids, True)
        forked = cpu() - c
        grew = 0
        if i == 0:  # numpy's and Python's allocations, traced (slow: not in the CPU figures)
            again = GraphRun(run.sg)
            tracemalloc.start()
            pricing.section_and_savings(again, ids, False)
            grew = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        print(f"round {i + 1}: unmodified replay (GraphRun) {base:.2f} s; one replay {one:.3f} s over {len(vs.k)} "
              f"events ({1e6 * one / len(vs.k):.2f} us each); walks of every step {walks:.2f} s; section and "
              f"prices: serial {serial:.2f} s, caller's with the fork {forked:.2f} s"
              + (f"; peak allocated through the serial section {grew / 1e6:.0f} MB" if i == 0 else "")
              + f"; load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
