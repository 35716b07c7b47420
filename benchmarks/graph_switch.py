"""`overlapscope ARGS...` with the dependency graph on or off: bench_graph.py's two sides of one comparison.

usage: python benchmarks/graph_switch.py on|off ARGS...

`off` replaces the graph's two stages with no-ops before the command runs: the per-rank build beside
the parse (report.build_rank_graph and the step it measures for the replay's choice of ranks, in the
pool's workers, which fork from this process and so inherit the change) and the parent's part
(report._price: the set graph, its replays, the critical path and the findings' savings). The report
then has no `critical_path` section and no savings: everything else is computed as the plain command
does. `on` runs the command unchanged through the same start-up, so both sides pay the same imports.
"""

from __future__ import annotations

import sys

from overlapscope.stack_imports import analysis_stack_imports


def main() -> None:
    mode, args = sys.argv[1], sys.argv[2:]
    if mode not in ("on", "off"):
        raise SystemExit("usage: graph_switch.py on|off ARGS...")
    with analysis_stack_imports():
        import analyzers.report as report
    if mode == "off":
        report.build_rank_graph = lambda *a, **k: None
        report._price = lambda *a, **k: None
    sys.argv = ["overlapscope", *args]
    from overlapscope.startup import run

    run()


if __name__ == "__main__":
    main()
