"""What the dependency graph costs `analyze`, and how fast `whatif` answers (8 x 54 MB set).

The 8-rank set of bench_scale.py (copies of the public 54 MB NCCL trace). The parse cache is warm
(filled once before the rounds) and the report cache emptied before every run, so each run analyzes
again from the parsed tables: what `analyze` costs once its files are parsed, where the graph's share
is largest. Each round runs, one after the other:

  analyze, graph off   `analyze SET -f json` through graph_switch.py off: the graph's two stages (the
                       per-rank build in the workers, the parent's set graph, replays, critical path
                       and savings) replaced by no-ops, everything else as the command runs it
  analyze, graph on    the same command through graph_switch.py on (unchanged)
  whatif               `whatif SET --fix launch-gaps -f json`

Recorded per run: wall time and CPU time of the whole process tree (bench_scale.measure). On a shared
machine wall times follow the other jobs' load, so the in-process figures come too: one process loads
the set from the parse cache as `analyze` does (`load_set(..., host_tables=False)`), then times
`analyze()` (time.process_time and wall) with the parent's graph stage on and off, alternately, and
the graph's parts (set graph, replays, critical path, savings); then what `whatif` does once its set
is loaded (report.graph_run and one fix's replay), from a graph-only load.

usage: python benchmarks/bench_graph.py [--rounds 5] [--code DIR]
  --code DIR: the source tree to measure (default: this one), e.g. a `git worktree` of another commit
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_scale  # noqa: E402

SWITCH = ROOT / "benchmarks" / "graph_switch.py"


def _path(code: Path) -> str:
    """The measured tree first, then whatever PYTHONPATH already holds (e.g. a host's carried deps)."""
    return os.pathsep.join(filter(None, [str(code), os.environ.get("PYTHONPATH")]))


def run(code: Path, args: list[str], cache: Path) -> bench_scale.Run:
    env = {**os.environ, "PYTHONPATH": _path(code), "OVERLAPSCOPE_CACHE_DIR": str(cache)}
    shutil.rmtree(cache / "reports", ignore_errors=True)
    return bench_scale.measure(str(code), [sys.executable, *args], limit_s=600, cap_mb=16_000, env=env)


def in_process(folder: str, rounds: int) -> dict[str, list[float]]:
    """analyze() in one process, the parent's graph stage on and off by turns (parent CPU and wall)."""
    import analyzers.report as report
    from analyzers.timeline.constants import DEFAULT_STEP_PATTERN
    from overlapscope.common import load_set, options_from

    options = options_from(None, False, DEFAULT_STEP_PATTERN)
    traces = load_set([folder], options=options, diagnose=True, host_tables=False)
    price = report._price
    parts: dict[str, float] = {}

    def timed(name: str, f):
        def wrapper(*a, **k):
            c = time.process_time()
            out = f(*a, **k)
            parts[name] = parts.get(name, 0.0) + time.process_time() - c
            return out
        return wrapper

    report.build_set_graph = timed("set graph", report.build_set_graph)
    report.GraphRun = timed("unmodified replay and steps", report.GraphRun)
    report.critical_path_section = timed("critical path", report.critical_path_section)
    report.finding_savings = timed("findings' savings (their fixes' replays)", report.finding_savings)
    out: dict[str, list[float]] = {}
    for _ in range(rounds):
        for mode in ("off", "on"):
            report._price = price if mode == "on" else (lambda *a, **k: None)
            parts.clear()
            c, w = time.process_time(), time.perf_counter()
            report.analyze(traces, options, diagnose=True)
            out.setdefault(f"analyze() CPU, graph {mode}", []).append(time.process_time() - c)
            out.setdefault(f"analyze() wall, graph {mode}", []).append(time.perf_counter() - w)
            for k, v in parts.items():
                out.setdefault(k, []).append(v)
    if hasattr(report, "graph_run"):  # whatif's own work once loaded (as `whatif` loads: graph_only)
        from analyzers.graph.analysis import whatif
        from analyzers.graph.fixes import Fix

        lean = load_set([folder], options=options, diagnose=True, host_tables=False, graph_only=True)
        for _ in range(rounds):
            c, w = time.process_time(), time.perf_counter()
            whatif(report.graph_run(lean, options), [Fix("launch-gaps")])
            out.setdefault("whatif after loading: graph_run + whatif() CPU", []).append(time.process_time() - c)
            out.setdefault("whatif after loading: graph_run + whatif() wall", []).append(time.perf_counter() - w)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--code", type=Path, default=ROOT)
    ap.add_argument("--in-process", dest="inproc", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.inproc:
        print(json.dumps(in_process(a.inproc, a.rounds)))
        return
    folder = bench_scale.build_set("ranks-8", 8, 1)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        analyze = ["analyze", str(folder), "-f", "json"]
        run(a.code, [str(SWITCH), "on", *analyze], cache)  # fill the parse cache (and byte-compile)
        runs: dict[str, list[bench_scale.Run]] = {"analyze, graph off": [], "analyze, graph on": [], "whatif": []}
        for _ in range(a.rounds):
            runs["analyze, graph off"].append(run(a.code, [str(SWITCH), "off", *analyze], cache))
            runs["analyze, graph on"].append(run(a.code, [str(SWITCH), "on", *analyze], cache))
            runs["whatif"].append(run(a.code, ["-m", "overlapscope", "whatif", str(folder), "--fix", "launch-gaps",
                                               "-f", "json"], cache))
        env = {**os.environ, "PYTHONPATH": _path(a.code), "OVERLAPSCOPE_CACHE_DIR": str(cache)}
        inproc = json.loads(subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--in-process", str(folder), "--rounds", str(a.rounds)],
            env=env, check=True, capture_output=True, text=True).stdout)
    rev = subprocess.run(["git", "-C", str(a.code), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    loads = [r.load_avg for rs in runs.values() for r in rs]
    print(f"### dependency graph cost, 8 x 54 MB, {a.rounds} rounds (commit {rev})\n")
    print(f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}; 1-min load average "
          f"{load0:.1f} at the start, {min(loads):.1f}-{max(loads):.1f} at the runs' ends\n")
    print("| run | wall median (s) | wall each | CPU median, process tree (s) | CPU each | status |")
    print("|---|---|---|---|---|---|")
    for k, rs in runs.items():
        print(f"| {k} | {statistics.median(r.wall_s for r in rs):.2f} | "
              f"{', '.join(f'{r.wall_s:.2f}' for r in rs)} | {statistics.median(r.cpu_s for r in rs):.2f} | "
              f"{', '.join(f'{r.cpu_s:.2f}' for r in rs)} | {', '.join(sorted({r.status for r in rs}))} |")
    on, off = runs["analyze, graph on"], runs["analyze, graph off"]
    wall = [g.wall_s / b.wall_s for g, b in zip(on, off, strict=True)]
    cpu = [g.cpu_s / b.cpu_s for g, b in zip(on, off, strict=True)]
    print(f"\nanalyze graph on / off, per round: wall {', '.join(f'{p:.2f}' for p in wall)} (median "
          f"{statistics.median(wall):.2f}); CPU {', '.join(f'{p:.2f}' for p in cpu)} (median "
          f"{statistics.median(cpu):.2f})\n")
    print("In one process, from the parse cache (medians over rounds, seconds of this process's CPU):\n")
    print("| figure | median | each |")
    print("|---|---|---|")
    for k, v in inproc.items():
        if v:
            print(f"| {k} | {statistics.median(v):.3f} | {', '.join(f'{x:.3f}' for x in v)} |")


if __name__ == "__main__":
    main()
