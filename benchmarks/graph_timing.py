"""`overlapscope ARGS...` with the dependency graph's stages timed: bench_engine.py's view into one run.

usage: python benchmarks/graph_timing.py OUT.json ARGS...

Runs the command unchanged and writes OUT.json at exit: the wall time from this process's start, the
caller's graph stage (report._price: set graph, unmodified replay, critical path, every finding's replay),
of it the set graph's build alone (report._set_graph: caller_set_graph), and the graph's part
of the per-rank stage (report.build_rank_graph, in the pool's workers, which
fork from this process and so inherit the timers; each rank's seconds travel back on its RankResults),
summed over ranks, with the number of ranks and of workers; and the per-rank stage's wall time
(load_traces: every file parsed and analyzed in the workers, their graph builds included). Each as wall
and CPU seconds (the caller's stage with its forked pricing process; the whole process tree's CPU at
exit): on a loaded machine the CPU shares are the steadier figure.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

from overlapscope.stack_imports import analysis_stack_imports

T0 = time.perf_counter()


def _children_cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def main() -> None:
    out, args = sys.argv[1], sys.argv[2:]
    with analysis_stack_imports():
        import analyzers.report as report
    spent = {"rank": 0.0, "rank_cpu": 0.0}
    figures = {"caller_graph_s": 0.0, "caller_graph_cpu_s": 0.0, "caller_set_graph_s": 0.0,
               "caller_set_graph_cpu_s": 0.0, "worker_graph_s": 0.0, "worker_graph_cpu_s": 0.0, "ranks": 0}

    def timed(fn, key):
        def wrapper(*a, **k):
            t, c, ch = time.perf_counter(), time.process_time(), _children_cpu()
            try:
                return fn(*a, **k)
            finally:
                if key == "rank":
                    spent["rank"] += time.perf_counter() - t
                    spent["rank_cpu"] += time.process_time() - c
                else:
                    figures[key] += time.perf_counter() - t
                    figures[key[:-2] + "_cpu_s"] += time.process_time() - c + _children_cpu() - ch
        return wrapper

    report.build_rank_graph = timed(report.build_rank_graph, "rank")
    report._price = timed(report._price, "caller_graph_s")
    if hasattr(report, "_set_graph"):  # a checkout before it (bench_engine.py --baseline) has none: left at 0
        report._set_graph = timed(report._set_graph, "caller_set_graph_s")
    stage_call = report.RankStage.__call__

    def rank_stage(self, trace):  # in the worker: the rank's graph seconds ride on its results
        spent["rank"] = spent["rank_cpu"] = 0.0
        res = stage_call(self, trace)
        res.graph_s, res.graph_cpu_s = spent["rank"], spent["rank_cpu"]
        return res

    report.RankStage.__call__ = rank_stage
    import analyzers.io.parallel as parallel
    run_files = parallel.run_files

    def counted(*a, **k):  # in the caller: each file's results, as the per-rank stage hands them back
        out = run_files(*a, **k)
        for fr in out:
            for res in (getattr(fr, "results", None) or {}).values():
                figures["worker_graph_s"] += getattr(res, "graph_s", 0.0)
                figures["worker_graph_cpu_s"] += getattr(res, "graph_cpu_s", 0.0)
                figures["ranks"] += 1
        return out

    parallel.run_files = counted
    import analyzers.io.load as load  # the per-rank stage (parse, per-rank analysis, graph builds) as a whole

    load.load_traces = timed(load.load_traces, "load_s")
    figures["load_s"] = figures["load_cpu_s"] = 0.0

    def write() -> None:
        from analyzers.io.parallel import default_jobs

        figures["wall_s"] = time.perf_counter() - T0
        t = os.times()
        figures["tree_cpu_s"] = t.user + t.system + _children_cpu()  # this process and its reaped workers
        figures["workers"] = min(default_jobs(), max(int(figures["ranks"]), 1))
        with open(out, "w") as fh:
            json.dump(figures, fh)

    import overlapscope.cli as cli

    leave = cli.exit_after_command  # ends the process with os._exit: no atexit

    def exit_after(code):
        write()
        leave(code)

    cli.exit_after_command = exit_after
    sys.argv = ["overlapscope", *args]
    from overlapscope.startup import run

    run()


if __name__ == "__main__":
    main()
