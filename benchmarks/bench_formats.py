"""Report-cache benchmark: every output format of `overlapscope analyze` on a rerun, against the cold run.

Every format (table, md, csv, json) is drawn from the one analysis document the report cache keeps,
so rerunning the same command on unchanged files reads the answer back instead of analysing. On the
8 x 54 MB set of bench_scale.py (copies of tests/data/public/hta/df_index_resolver.json.gz with their
rank rewritten, built under benchmarks/data/), for each format, as whole processes one after the other:
  cold        `overlapscope analyze SET -f FMT` with empty parse and report caches
  parse only  the report cache emptied, the parse cache kept (what a changed option costs)
  rerun       the same command again: a report-cache hit
Each is run --repeat times and the best (lowest wall) is kept; the rerun speed-up is cold / rerun.
Prints a Markdown table (paste into RESULTS.md).

usage: python benchmarks/bench_formats.py [--ranks 8] [--repeat 3] [--formats table,md,csv,json]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale import Run, build_set, compile_sources, measure  # noqa: E402

LIMIT_S, CAP_MB = 600.0, 16_000.0


def bench_format(folder: Path, fmt: str, cache: Path, repeat: int) -> dict[str, Run]:
    """Best of `repeat` rounds of cold, parse-cache-only and rerun for one format."""
    cmd = [sys.executable, "-m", "overlapscope", "analyze", str(folder), "-f", fmt]
    env = {"OVERLAPSCOPE_CACHE_DIR": str(cache), "COLUMNS": "160"}
    best: dict[str, Run] = {}

    def keep(kind: str, run: Run) -> None:
        if run.status != "ok":
            raise SystemExit(f"{fmt} {kind}: {run.status}")
        if kind not in best or run.wall_s < best[kind].wall_s:
            best[kind] = run

    for _ in range(repeat):
        shutil.rmtree(cache, ignore_errors=True)
        keep("cold", measure("cold", cmd, LIMIT_S, CAP_MB, env=env))
        shutil.rmtree(cache / "reports", ignore_errors=True)
        keep("parse only", measure("parse only", cmd, LIMIT_S, CAP_MB, env=env))
        keep("rerun", measure("rerun", cmd, LIMIT_S, CAP_MB, env=env))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8, help="ranks of ~54 MB in the set")
    ap.add_argument("--repeat", type=int, default=3, help="rounds per format (the best wall time is kept)")
    ap.add_argument("--formats", default="table,md,csv,json")
    a = ap.parse_args()
    compile_sources()
    name = f"{a.ranks}x54MB"
    folder = build_set(name, a.ranks, 1)
    size = sum(f.stat().st_size for f in folder.glob("rank*.json")) / 1e6
    cache = Path(tempfile.mkdtemp(prefix="overlapscope-bench-formats-"))
    rows = []
    try:
        for fmt in a.formats.split(","):
            b = bench_format(folder, fmt, cache, a.repeat)
            rows.append(f"| {fmt} | {b['cold'].wall_s:.2f} | {b['parse only'].wall_s:.2f} | {b['rerun'].wall_s:.2f} "
                        f"| {b['cold'].wall_s / b['rerun'].wall_s:.1f}× |")
            print(rows[-1], flush=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print(f"\n{platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} cores, "
          f"Python {platform.python_version()}; set {name} ({size:.0f} MB); best of {a.repeat}; "
          f"load avg {os.getloadavg()[0]:.1f}\n")
    print("| format | cold s | parse cache only s | rerun (report cache) s | rerun speed-up |")
    print("|---|---:|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
