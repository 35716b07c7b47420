"""The caller's graph stage taken apart, in CPU seconds, on one set: what each piece of `analyze`'s pricing costs.

usage: python benchmarks/graph_stages.py SET [--rounds 3]

Analyzes SET once (its findings) and builds its graph (report.graph_run), then, each round on a fresh copy of
its set graph (no cache carried over): the unmodified replay (GraphRun), one replay of the same inputs (its
events and CPU seconds per event), the walks of every step's critical path on it, and `analyze`'s critical path section
with every finding's price (pricing.section_and_savings for the findings of analyze on SET) serially; with the
forked process once the unmodified replay is made; and from the set graph as `analyze` makes them
(pricing.priced_run: the fork before the unmodified replay). Forked, the caller's CPU and the forked process's
are given apart, and the longer of the two: what the stage would take on two otherwise idle cores, a figure
that a loaded machine's wall time does not give. Also, the first round, the peak of
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


def _children_cpu() -> float:
    """CPU seconds of this process's reaped children (a forked pricing process, once its pool has shut down)."""
    t = os.times()
    return t.children_user + t.children_system


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
        c, ch = cpu(), _children_cpu()
        pricing.section_and_savings(again, ids, True)
        forked, forked_child = cpu() - c, _children_cpu() - ch
        # the fork before the unmodified replay (analyze's order); a checkout without it: as above, after it
        c, ch = cpu(), _children_cpu()
        if hasattr(pricing, "priced_run"):
            pricing.priced_run(fresh(), ids, True)
        else:
            pricing.section_and_savings(GraphRun(fresh()), ids, True)
        priced, priced_child = cpu() - c, _children_cpu() - ch
        if not hasattr(pricing, "priced_run"):  # its child starts once the unmodified replay is made
            priced_child += base
        grew = 0
        if i == 0:  # numpy's and Python's allocations, traced (slow: not in the CPU figures)
            again = GraphRun(run.sg)
            tracemalloc.start()
            pricing.section_and_savings(again, ids, False)
            grew = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        print(f"round {i + 1}: unmodified replay (GraphRun) {base:.2f} s; one replay {one:.3f} s over {len(vs.k)} "
              f"events ({1e6 * one / len(vs.k):.2f} us each); walks of every step {walks:.2f} s; section and "
              f"prices: serial {serial:.2f} s, with the fork after it {forked:.2f} s here + {forked_child:.2f} s there "
              f"(the unmodified replay and the longer of the two: {base + max(forked, forked_child):.2f} s), as analyze"
              f" makes them from the set graph {priced:.2f} s here + {priced_child:.2f} s there (the longer, the "
              f"child's counted from the start: {max(priced, priced_child):.2f} s)"
              + (f"; peak allocated through the serial section {grew / 1e6:.0f} MB" if i == 0 else "")
              + f"; load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
