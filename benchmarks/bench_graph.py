"""What the dependency graph costs `analyze`, and how fast `whatif` answers (8 x 54 MB set).

The 8-rank set of bench_scale.py (copies of the public 54 MB NCCL trace). Two code trees run the
same command one after the other, round after round: this tree and a baseline revision without
the graph (default: main; `git archive` into a temporary folder). The parse cache is warm (filled
once before the rounds) and the report cache emptied before every run, so each run analyzes again
from the parsed tables: what `analyze` costs once its files are parsed, where the graph's share
is largest. Recorded per run: wall time and CPU time of the whole process tree (bench_scale.measure).
`whatif --fix launch-gaps` runs from the same warm parse cache.

usage: python benchmarks/bench_graph.py [--rounds 5] [--base main]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_scale  # noqa: E402


def export(rev: str, dest: Path) -> None:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)


def run(code: Path, args: list[str], cache: Path) -> bench_scale.Run:
    env = {**os.environ, "PYTHONPATH": str(code), "OVERLAPSCOPE_CACHE_DIR": str(cache)}
    shutil.rmtree(cache / "reports", ignore_errors=True)
    cmd = [sys.executable, "-m", "overlapscope", *args]
    return bench_scale.measure(str(code), cmd, limit_s=600, cap_mb=16_000, env=env)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--base", default="main")
    a = ap.parse_args()
    folder = bench_scale.build_set("ranks-8", 8, 1)
    with tempfile.TemporaryDirectory() as tmp:
        base, cache = Path(tmp) / "base", Path(tmp) / "cache"
        base.mkdir()
        export(a.base, base)
        analyze = ["analyze", str(folder), "-f", "json"]
        for code in (base, ROOT):
            run(code, analyze, cache)  # fill the parse cache (and byte-compile)
        runs: dict[str, list[bench_scale.Run]] = {"base": [], "graph": [], "whatif": []}
        for _ in range(a.rounds):
            runs["base"].append(run(base, analyze, cache))
            runs["graph"].append(run(ROOT, analyze, cache))
            runs["whatif"].append(run(ROOT, ["whatif", str(folder), "--fix", "launch-gaps", "-f", "json"], cache))
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    print(f"### dependency graph cost, 8 x 54 MB, {a.rounds} rounds (HEAD {rev} against {a.base})\n")
    print(f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}; load average at the "
          f"end {os.getloadavg()[0]:.1f}\n")
    print("| run | wall median (s) | wall each | CPU median (s) | status |")
    print("|---|---|---|---|---|")
    for k, rs in runs.items():
        print(f"| {k} | {statistics.median(r.wall_s for r in rs):.2f} | "
              f"{', '.join(f'{r.wall_s:.2f}' for r in rs)} | {statistics.median(r.cpu_s for r in rs):.2f} | "
              f"{', '.join(sorted({r.status for r in rs}))} |")
    pairs = [g.wall_s / b.wall_s for g, b in zip(runs["graph"], runs["base"], strict=True)]
    cpu = [g.cpu_s / b.cpu_s for g, b in zip(runs["graph"], runs["base"], strict=True)]
    print(f"\nanalyze with the graph / without, per round (wall): {', '.join(f'{p:.2f}' for p in pairs)}; "
          f"median {statistics.median(pairs):.2f}; CPU median {statistics.median(cpu):.2f}")


if __name__ == "__main__":
    main()
