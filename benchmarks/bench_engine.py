"""The graph engine on a 2-core machine: cold `analyze` against HolisticTraceAnalysis, the graph stage's
share of it, and `whatif` from the parse cache, all in one run.

The sets are those of the engine issue: a real 2 x H200 trace (sample_traces/ag-gemm/host-sync, a GEMM
with all-gathers and a host sync in every iteration) tiled 400 times in time with make_large_trace.py,
its ProfilerStep ranges left out (each rank's whole window is then one step): 56 MB, 9,600 kernels and
3,600 blocking syncs a rank. `2` is the two ranks; `8` is eight ranks, rank r a copy of rank r % 2 whose
distributedInfo says rank r of 8. HolisticTraceAnalysis keys each file by the first `"rank": N` in it, so
every file must name its own rank, or HTA reads one file per rank number and drops the rest (the run
checks how many ranks HTA's overlap table has). They go under benchmarks/data/engine/ (git-ignored).

Each round, per set, one after the other, each as a whole process:
  cold     `overlapscope analyze SET -f json --no-cache` through graph_timing.py (the command unchanged,
           its graph stages timed): wall time, and the graph stage's wall time = the caller's
           (set graph, replays, critical path, every finding's price) + the per-rank graph builds summed
           over ranks / workers (they run beside the parse, one per worker)
  HTA      TraceAnalysis(trace_dir=SET).get_comm_comp_overlap()
  whatif   `overlapscope whatif SET --fix host-syncs -f json`, from the parse cache (filled once before the
           rounds, in a cache folder of its own; the report cache emptied before it), the same question once
           more (a report-cache hit), and with a second fix (--fix host-syncs --fix peer-wait, the report cache
           emptied)
Printed per run: the figures and the 1-minute load average at its end (other jobs on a shared machine);
then the ranges and the ratios (HTA / cold, pair by pair, of wall time and of the process tree's CPU time, the
steadier figure when other jobs share the cores; graph share; whatif / cold). The checkouts' modules are
byte-compiled first, as an installed package's are.

With --baseline DIR (a checkout of another commit, e.g. `git archive COMMIT | tar -x -C DIR`), each round
also runs that code's cold analyze through the same timer, right after this one's: their ratio is taken
round by round, as the load drifts.

usage: python benchmarks/bench_engine.py [--sets 2,8] [--rounds 3] [--no-hta] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "engine"
SOURCE = ROOT / "sample_traces" / "ag-gemm" / "host-sync"
COPIES = 400
sys.path.insert(0, str(ROOT / "benchmarks"))

HTA_SNIPPET = (
    "import logging,sys; logging.disable(logging.WARNING);"
    "from hta.trace_analysis import TraceAnalysis;"
    "df = TraceAnalysis(trace_dir=sys.argv[1]).get_comm_comp_overlap(visualize=False); print(df.to_string());"
    "n = df['rank'].nunique(); sys.exit(0 if n == int(sys.argv[2]) else f'HTA read {n} ranks, not {sys.argv[2]}')"
)


def build_sets(names: list[str]) -> dict[str, Path]:
    """The tiled ranks, then the sets (module docstring)."""
    from make_large_trace import tile

    tiled = DATA / "tiled"
    for r in (0, 1):
        if not (tiled / f"rank{r}.json").exists():
            tile(SOURCE / f"rank{r}.json.gz", tiled / f"rank{r}.json", COPIES, drop_steps=True)
    out = {}
    for name in names:
        n = int(name)
        folder = DATA / f"set-{n}"
        if not (folder / ".ranked").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            for r in range(n):
                src = tiled / f"rank{r % 2}.json"
                if n == 2:
                    os.link(src, folder / f"rank{r}.json")
                else:
                    _write_as_rank(src, folder / f"rank{r}.json", r, n)
            (folder / ".ranked").touch()
        out[name] = folder
    return out


def _write_as_rank(src: Path, out: Path, rank: int, world: int) -> None:
    """src's bytes with its distributedInfo saying rank of world (the events untouched)."""
    raw = src.read_bytes()
    cut = raw.index(b'"traceEvents"')
    head = json.loads(raw[:cut] + b'"traceEvents": []}')
    del head["traceEvents"]
    head["distributedInfo"] = {**head.get("distributedInfo", {}), "rank": rank, "world_size": world}
    out.write_bytes(json.dumps(head)[:-1].encode() + b", " + raw[cut:])


CPU: dict[str, float] = {}  # the CPU seconds of the last run() (its whole process tree, reaped children)


def run(cmd: list[str], env: dict[str, str] | None = None) -> float:
    """Wall seconds of cmd; its process tree's CPU seconds (sampled every 50 ms with psutil, as bench_scale.py
    does: pool workers that exit unreaped, which getrusage would miss, are counted) are left in CPU["last"]."""
    from bench_scale import measure

    r = measure("run", cmd, limit_s=3600, cap_mb=1e9, env=env)
    if r.status != "ok":
        raise SystemExit(f"{r.status}: {' '.join(cmd)}")
    CPU["last"] = r.cpu_s
    return r.wall_s


def compile_sources(checkout: Path) -> None:
    """Byte-compile a checkout's modules once, as `pip install` does: with PYTHONDONTWRITEBYTECODE set (as on the
    development VM) every run would otherwise compile every module it imports again (~0.3 s a process)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(checkout / d) for d in
                    ("analyzers", "overlapscope", "viz", "benchmarks"))], stdout=subprocess.DEVNULL, check=False)


def load() -> float:
    return os.getloadavg()[0]


def spread(xs: list[float], fmt: str = "{:.2f}") -> str:
    return fmt.format(min(xs)) + ("" if len(xs) < 2 else "–" + fmt.format(max(xs)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="2,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-hta", action="store_true", help="leave HTA out (the ratio is then not measured)")
    ap.add_argument("--baseline", type=Path, help="another checkout whose cold analyze runs in each round too")
    a = ap.parse_args()
    sets = build_sets(a.sets.split(","))
    for checkout in (ROOT, *([a.baseline.resolve()] if a.baseline else [])):
        compile_sources(checkout)
    py = sys.executable
    env = {"PYTHONPATH": str(ROOT)}
    print(f"machine: {platform.machine()}, {len(os.sched_getaffinity(0))} cores, "
          f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM, Python {platform.python_version()}; "
          f"load average at start {load():.1f}", flush=True)
    cache = Path(tempfile.mkdtemp(prefix="overlapscope-engine-cache-"))
    cenv = {**env, "OVERLAPSCOPE_CACHE_DIR": str(cache)}
    try:
        for name, folder in sets.items():
            size = sum(p.stat().st_size for p in folder.glob("*.json")) / 1e6
            print(f"\n## set {name}: {folder.relative_to(ROOT)} ({name} ranks, {size:.0f} MB)", flush=True)
            run([py, "-m", "overlapscope", "analyze", str(folder), "-f", "json"], cenv)  # fills the parse cache
            rows = []
            for i in range(a.rounds):
                timing = Path(tempfile.mkstemp(suffix=".json")[1])
                cold = run([py, str(ROOT / "benchmarks" / "graph_timing.py"), str(timing), "analyze", str(folder),
                            "-f", "json", "--no-cache"], env)
                cold_cpu = CPU["last"]
                t = json.loads(timing.read_text())
                timing.unlink()
                graph = t["caller_graph_s"] + t["worker_graph_s"] / max(t["workers"], 1)
                cpu_share = (t["caller_graph_cpu_s"] + t["worker_graph_cpu_s"]) / t["tree_cpu_s"]
                load_cold = load()
                ranks = str(len(list(folder.glob("rank*.json"))))
                hta = None if a.no_hta else run([py, "-c", HTA_SNIPPET, str(folder), ranks])
                hta_cpu = CPU["last"]
                load_hta = load()
                ask = [py, "-m", "overlapscope", "whatif", str(folder), "--fix", "host-syncs", "-f", "json"]
                shutil.rmtree(cache / "reports", ignore_errors=True)
                wi1 = run(ask, cenv)
                hit = run(ask, cenv)
                shutil.rmtree(cache / "reports", ignore_errors=True)
                wi2 = run(ask + ["--fix", "peer-wait"], cenv)
                base = None
                if a.baseline is not None:
                    timing = Path(tempfile.mkstemp(suffix=".json")[1])
                    base = run([py, str(ROOT / "benchmarks" / "graph_timing.py"), str(timing), "analyze", str(folder),
                                "-f", "json", "--no-cache"], {"PYTHONPATH": str(a.baseline.resolve())})
                    tb = json.loads(timing.read_text())
                    timing.unlink()
                    base_graph = tb["caller_graph_s"] + tb["worker_graph_s"] / max(tb["workers"], 1)
                    base_cpu = (tb["caller_graph_cpu_s"] + tb["worker_graph_cpu_s"]) / tb["tree_cpu_s"]
                    print(f"  baseline cold {base:.2f} s (graph stage {base_graph:.2f} s = {base_graph / base:.0%}; "
                          f"CPU: graph {base_cpu:.0%} of {tb['tree_cpu_s']:.2f} s), load {load():.1f}", flush=True)
                rows.append({"cpu_share": cpu_share, "base": base, "cold": cold, "graph": graph, "cold_cpu": cold_cpu,
                             "hta_cpu": hta_cpu, "parse": t.get("load_s"),
                             "caller_graph": t["caller_graph_s"],
                             "worker_graph": t["worker_graph_s"], "hta": hta, "wi1": wi1, "wi2": wi2, "hit": hit,
                             "load": (load_cold, load_hta, load())})
                r = rows[-1]
                print(f"round {i + 1}: cold {cold:.2f} s (graph stage {graph:.2f} s = {graph / cold:.0%}: caller "
                      f"{t['caller_graph_s']:.2f} s, per-rank builds {t['worker_graph_s']:.2f} s over "
                      f"{t['workers']} workers; CPU: graph {cpu_share:.0%} of the tree's "
                      f"{t['tree_cpu_s']:.2f} s), load {load_cold:.1f}"
                      + f"; per-rank stage {t.get('load_s', float('nan')):.2f} s; tree CPU {cold_cpu:.2f} s"
                      + ("" if hta is None else f" | HTA {hta:.2f} s (CPU {hta_cpu:.2f} s), load {load_hta:.1f}, "
                                                f"HTA / cold {hta / cold:.1f}x wall, {hta_cpu / cold_cpu:.1f}x CPU")
                      + f" | whatif {wi1:.2f} s ({wi1 / cold:.2f}x cold), +1 fix {wi2:.2f} s, repeated {hit:.2f} s, "
                        f"load {r['load'][2]:.1f}",
                      flush=True)
            graphs = [r["graph"] for r in rows]
            print(f"- cold analyze {spread([r['cold'] for r in rows])} s; graph stage {spread(graphs)} s, "
                  f"share {spread([r['graph'] / r['cold'] for r in rows], '{:.0%}')} of the wall time, "
                  f"{spread([r['cpu_share'] for r in rows], '{:.0%}')} of the CPU time")
            if a.baseline is not None:
                print(f"- baseline cold analyze {spread([r['base'] for r in rows])} s; baseline / this, per round "
                      f"{spread([r['base'] / r['cold'] for r in rows])}"
                      + ("" if a.no_hta else
                         f"; HTA / baseline {spread([r['hta'] / r['base'] for r in rows], '{:.1f}')}x"))
            if not a.no_hta:
                print(f"- HTA {spread([r['hta'] for r in rows])} s; HTA / cold per round "
                      f"{spread([r['hta'] / r['cold'] for r in rows], '{:.1f}')}x wall, "
                      f"{spread([r['hta_cpu'] / r['cold_cpu'] for r in rows], '{:.1f}')}x CPU (tree CPU: cold "
                      f"{spread([r['cold_cpu'] for r in rows])} s, HTA {spread([r['hta_cpu'] for r in rows])} s)")
            print(f"- whatif from the parse cache {spread([r['wi1'] for r in rows])} s = "
                  f"{spread([r['wi1'] / r['cold'] for r in rows])}x cold; one more fix "
                  f"{spread([r['wi2'] - r['wi1'] for r in rows], '{:+.2f}')} s; repeated (report cache) "
                  f"{spread([r['hit'] for r in rows])} s")
            print(f"- load average over the runs {spread([x for r in rows for x in r['load']], '{:.1f}')}", flush=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
