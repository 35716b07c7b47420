"""Scale benchmark: many ranks, overlapscope vs HolisticTraceAnalysis 0.5.0 vs the decode floor.

Builds rank sets from one real public trace (tests/data/public/hta/df_index_resolver.json.gz,
a 54 MB Kineto trace of an 8-rank V100 job with 2,020 NCCL AllReduce kernels): N copies with
their distributedInfo rank rewritten (2, 8 and 32 ranks of ~54 MB), and a set of 2 ranks of
~500 MB tiled in time with benchmarks/make_large_trace.py. Sets go under benchmarks/data/
(git-ignored; --clean removes them afterwards).

For each set, every tool runs as a whole process, one after the other in the same call:
  floor       msgspec.json.decode of each rank's bytes, one process per rank, as many at a time
              as there are cores (what any JSON-reading tool must at least pay)
  ours-cold   `overlapscope analyze SET -f json` with an empty parse cache (it fills it)
  HTA         TraceAnalysis(trace_dir=SET).get_comm_comp_overlap()
  ours-warm   the same overlapscope command again: a report-cache hit (the answer is read back)
  ours-parse  the report cache emptied, the parse cache kept: tables read back, analysis redone
              (what a changed option costs on files parsed before)
The project's modules are byte-compiled first (compile_sources), as an installed package is.
Recorded: wall time, CPU time (user+sys of the whole tree) and peak RSS of the whole process
tree (parent + workers, sampled every 50 ms). A run over the time limit or the memory cap is
killed and recorded as such. Results are appended as a Markdown section to stdout (paste
into RESULTS.md) and saved as JSON beside the data.

usage: python benchmarks/bench_scale.py [--sets 2,8,32,2x500] [--hta-limit-s 600]
       [--mem-cap-gb 16] [--repeat 1] [--clean]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"
SOURCE = ROOT / "tests" / "data" / "public" / "hta" / "df_index_resolver.json.gz"
sys.path.insert(0, str(ROOT / "benchmarks"))

HTA_SNIPPET = (
    "import logging,sys; logging.disable(logging.WARNING);"
    "from hta.trace_analysis import TraceAnalysis;"
    "print(TraceAnalysis(trace_dir=sys.argv[1]).get_comm_comp_overlap(visualize=False).to_string())"
)
FLOOR_SNIPPET = "import msgspec,sys; msgspec.json.decode(open(sys.argv[1],'rb').read())"
DIST = re.compile(rb'"distributedInfo":\s*\{[^}]*\}')


@dataclass
class Run:
    tool: str
    status: str  # ok | failed (rc N) | time limit | memory cap
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    load_avg: float = 0.0  # 1-minute load average of the machine when the run ended (others' jobs)


def _set_rank(head: bytes, rank: int, world: int) -> bytes:
    info = f'"distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {world}}}'.encode()
    out, n = DIST.subn(info, head, count=1)
    if n != 1:
        raise SystemExit("source trace has no distributedInfo to rewrite")
    return out


def build_set(name: str, ranks: int, copies: int) -> Path:
    """ranks files of one rank each; copies > 1 tiles the source in time first."""
    folder = DATA / name
    marker = folder / ".complete"
    if marker.exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    import gzip

    if copies > 1:
        from make_large_trace import tile

        base = DATA / f"tiled-{copies}.json"
        if not base.exists():
            tile(SOURCE, base, copies)
        raw = base.read_bytes()
    else:
        raw = gzip.decompress(SOURCE.read_bytes())
    cut = raw.index(b'"traceEvents"')
    head, body = raw[:cut], raw[cut:]
    for r in range(ranks):
        (folder / f"rank{r}.json").write_bytes(_set_rank(head, r, ranks) + body)
    marker.touch()
    return folder


def measure(tool: str, cmd: list[str] | list[list[str]], limit_s: float, cap_mb: float, parallel: int = 1,
            env: dict | None = None) -> Run:
    """Run cmd (or several commands, `parallel` at a time) and measure the whole process tree."""
    queue = [cmd] if isinstance(cmd[0], str) else list(cmd)
    n_commands = len(queue)
    running: list[subprocess.Popen] = []
    t0 = time.perf_counter()
    peak = 0.0
    cpu_done = 0.0
    status = "ok"
    seen: dict[int, float] = {}
    ended: list[float] = []  # each process's exit time, taken by a thread waiting on it (not the poll below)

    def start(command: list[str]) -> subprocess.Popen:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env={**os.environ, **(env or {})})
        threading.Thread(target=note_exit, args=(proc.pid,), daemon=True).start()
        return proc

    def note_exit(pid: int) -> None:
        try:  # WNOWAIT: the poll below still reaps it and reads its exit code
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:  # already reaped by the poll: its time is the poll's
            pass
        ended.append(time.perf_counter())

    while queue or running:
        while queue and len(running) < parallel:
            running.append(start(queue.pop(0)))
        rss = 0
        for p in list(running):
            try:
                proc = psutil.Process(p.pid)
                tree = [proc] + proc.children(recursive=True)
            except psutil.NoSuchProcess:
                tree = []
            for q in tree:
                try:
                    rss += q.memory_info().rss
                    t = q.cpu_times()
                    seen[q.pid] = t.user + t.system
                except psutil.NoSuchProcess:
                    pass
            if p.poll() is not None:
                running.remove(p)
                if p.returncode != 0 and status == "ok":
                    err = (p.stderr.read().decode(errors="replace").strip().splitlines() or [""])[-1]
                    status = f"failed (rc {p.returncode}: {err[:120]})"
        peak = max(peak, rss / 1e6)
        over = "time limit" if time.perf_counter() - t0 > limit_s else ("memory cap" if peak > cap_mb else "")
        if over:
            status = f"{over} (killed at {limit_s:.0f} s / {cap_mb / 1000:.0f} GB cap)"
            for p in running:
                for q in psutil.Process(p.pid).children(recursive=True) + [psutil.Process(p.pid)]:
                    try:
                        q.kill()
                    except psutil.NoSuchProcess:
                        pass
                p.wait()
            running.clear()
            queue.clear()
        time.sleep(0.05)
    # to the last exit as the waiting threads saw it: the 50 ms poll would round every run up by 0-50 ms
    wall = (max(ended) if len(ended) == n_commands and status == "ok" else time.perf_counter()) - t0
    cpu_done = sum(seen.values())
    return Run(tool, status, wall, cpu_done, peak, os.getloadavg()[0])


def bench_set(folder: Path, limit_s: float, cap_mb: float, cache: Path, repeat: int) -> list[Run]:
    """floor, ours cold, HTA, ours warm, ours --no-cache; the whole round `repeat` times."""
    files = sorted(folder.glob("rank*.json"))
    ours = [sys.executable, "-m", "overlapscope", "analyze", str(folder), "-f", "json"]
    env = {"OVERLAPSCOPE_CACHE_DIR": str(cache)}
    cores = len(os.sched_getaffinity(0))
    runs = []
    for _ in range(repeat):
        runs.append(measure("floor", [[sys.executable, "-c", FLOOR_SNIPPET, str(f)] for f in files], limit_s,
                            cap_mb, parallel=cores))
        print(_line(folder, runs[-1]), flush=True)
        shutil.rmtree(cache, ignore_errors=True)
        runs.append(measure("overlapscope (cold cache)", ours, limit_s, cap_mb, env=env))
        print(_line(folder, runs[-1]), flush=True)
        runs.append(measure("HTA 0.5.0", [sys.executable, "-c", HTA_SNIPPET, str(folder)], limit_s, cap_mb))
        print(_line(folder, runs[-1]), flush=True)
        runs.append(measure("overlapscope (warm cache)", ours, limit_s, cap_mb, env=env))
        print(_line(folder, runs[-1]), flush=True)
        shutil.rmtree(cache / "reports", ignore_errors=True)
        runs.append(measure("overlapscope (parse cache only)", ours, limit_s, cap_mb, env=env))
        print(_line(folder, runs[-1]), flush=True)
        runs.append(measure("overlapscope --no-cache", ours + ["--no-cache"], limit_s, cap_mb, env=env))
        print(_line(folder, runs[-1]), flush=True)
    return runs


def _line(folder: Path, r: Run) -> str:
    return f"{folder.name}: {r.tool}: {r.status}, wall {r.wall_s:.2f} s, cpu {r.cpu_s:.2f} s, " \
           f"peak tree RSS {r.peak_rss_mb:.0f} MB, load avg {r.load_avg:.1f}"


def report(results: dict[str, list[Run]], sizes: dict[str, float]) -> str:
    """Markdown: every run, then per set the ratios of the best (lowest-wall) run of each tool."""
    out = [f"machine: {platform.machine()}, {len(os.sched_getaffinity(0))} cores, "
           f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM, Python {platform.python_version()}", ""]
    out.append("| set | tool | status | wall s | CPU s | peak tree RSS MB | load avg |")
    out.append("|---|---|---|---|---|---|---|")
    for name, runs in results.items():
        for r in runs:
            out.append(f"| {name} ({sizes[name]:.0f} MB) | {r.tool} | {r.status} | {r.wall_s:.2f} | {r.cpu_s:.2f} "
                       f"| {r.peak_rss_mb:.0f} | {r.load_avg:.1f} |")
    out.append("")
    for name, runs in results.items():
        best: dict[str, Run] = {}
        for r in runs:
            if r.tool not in best or (r.status == "ok" and r.wall_s < best[r.tool].wall_s):
                best[r.tool] = r
        cold, warm, hta, floor = (best["overlapscope (cold cache)"], best["overlapscope (warm cache)"],
                                  best["HTA 0.5.0"], best["floor"])
        nocache = best["overlapscope --no-cache"]
        parsed = best["overlapscope (parse cache only)"]
        parts = [f"{name} (best of {sum(r.tool == 'floor' for r in runs)}): overlapscope --no-cache / floor "
                 f"{nocache.wall_s / floor.wall_s:.2f}x wall ({nocache.cpu_s / floor.cpu_s:.2f}x CPU)",
                 f"cold / warm cache (report-cache hit) {cold.wall_s / warm.wall_s:.1f}x wall "
                 f"({cold.cpu_s / warm.cpu_s:.1f}x CPU)",
                 f"cold / parse cache only {cold.wall_s / parsed.wall_s:.1f}x wall "
                 f"({cold.cpu_s / parsed.cpu_s:.1f}x CPU)"]
        if hta.status == "ok":
            parts.append(f"HTA / overlapscope cold {hta.wall_s / cold.wall_s:.1f}x wall "
                         f"({hta.cpu_s / cold.cpu_s:.1f}x CPU), HTA / overlapscope --no-cache "
                         f"{hta.wall_s / nocache.wall_s:.1f}x wall; peak RSS overlapscope cold / HTA "
                         f"{cold.peak_rss_mb / hta.peak_rss_mb:.2f}")
        else:
            parts.append(f"HTA {hta.status}")
        ours_rss = max(r.peak_rss_mb for r in runs if r.tool.startswith("overlapscope"))
        parts.append(f"overlapscope peak tree RSS (max over its runs) {ours_rss:.0f} MB")
        out.append("- " + "; ".join(parts))
    return "\n".join(out)


def compile_sources() -> None:
    """Bytecode for the project's modules, as an installed package has (pip compiles at install,
    and HTA's site-packages hold theirs): without it, a machine with PYTHONDONTWRITEBYTECODE set
    recompiles ~70 modules in every overlapscope process (about 0.08 s), which no user pays."""
    import compileall

    for package in ("analyzers", "viz", "overlapscope"):
        compileall.compile_dir(ROOT / package, quiet=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="2,8,32,2x500", help="comma list of: 2, 8, 32 (ranks of ~54 MB), 2x500")
    ap.add_argument("--hta-limit-s", type=float, default=600, help="time limit per run")
    ap.add_argument("--mem-cap-gb", type=float, default=16, help="kill a run whose process tree exceeds this")
    ap.add_argument("--repeat", type=int, default=1, help="rounds per set (ratios use each tool's best run)")
    ap.add_argument("--clean", action="store_true", help="delete benchmarks/data afterwards")
    a = ap.parse_args()
    compile_sources()
    results: dict[str, list[Run]] = {}
    sizes: dict[str, float] = {}
    cache = Path(tempfile.mkdtemp(prefix="overlapscope-bench-cache-"))
    try:
        for s in a.sets.split(","):
            name, ranks, copies = (f"{s}x54MB", int(s), 1) if s.isdigit() else ("2x500MB", 2, 10)
            folder = build_set(name, ranks, copies)
            sizes[name] = sum(f.stat().st_size for f in folder.glob("rank*.json")) / 1e6
            print(f"== {name}: {ranks} files, {sizes[name]:.0f} MB", flush=True)
            results[name] = bench_set(folder, a.hta_limit_s, a.mem_cap_gb * 1000, cache, a.repeat)
            (DATA / "bench_scale.json").write_text(json.dumps(
                {k: [asdict(r) for r in v] for k, v in results.items()}, indent=1))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        if a.clean:
            shutil.rmtree(DATA, ignore_errors=True)
    print("\n" + report(results, sizes))


if __name__ == "__main__":
    main()
