"""`overlapscope export` on a 1M-kernel trace set: time and size of each file.

The set is the one of bench_app_timeline.py (the public HTA trace_filter pair tiled in time to
>= 500,000 GPU activities per rank). Measured after analyze() (timed too: every export needs it):
  1. Perfetto: building the tracks (analyzers/export/perfetto.py) and writing .json / .json.gz
     (viz/perfetto_json.py), checked to hold every GPU activity once; against the
     straightforward writer (one dict per event, stdlib json.dump) on the same events;
  2. the HTML report (app level of detail) and its size;
  3. the PNG of the timeline (kaleido + system Chromium).

usage: python benchmarks/bench_export.py [--ranks-kernels 500000] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from bench_app_timeline import million_kernel_set  # noqa: E402

from analyzers.export.perfetto import PerfettoData, perfetto_data  # noqa: E402
from analyzers.report import analyze  # noqa: E402
from viz.export_html import figure_image, report_html, report_timeline, timeline_of  # noqa: E402
from viz.perfetto_json import write_perfetto  # noqa: E402

CPU: dict[str, float] = {}  # CPU seconds of the last timed() call: the machine is shared, wall time is noisy


def timed(fn):
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    CPU["last"] = time.process_time() - c
    return out, time.perf_counter() - t


def naive_write(data: PerfettoData, out: Path) -> None:
    """The obvious writer, for comparison: a dict per event, then json.dump."""
    events = []
    for frame, is_gpu in ((data.gpu, True), (data.spans, False)):
        for r in frame.itertuples(index=False):
            events.append({"ph": "X", "pid": int(r.pid), "tid": int(r.tid), "ts": r.start_ns / 1e3,
                           "dur": (r.end_ns - r.start_ns) / 1e3, "name": r.name, "cat": r.cat,
                           "args": {"correlation": int(r.correlation), "kind": r.kind} if is_gpu else (r.args or {})})
    with out.open("w") as fh:
        json.dump({"traceEvents": events}, fh, default=str)


def mb(path: Path) -> str:
    return f"{path.stat().st_size / 1e6:.1f} MB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks-kernels", type=int, default=500_000, help="GPU activities per rank (2 ranks)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "data" / "export")
    ap.add_argument("--skip-naive", action="store_true")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"numpy {np.__version__}, pandas {pd.__version__}")
    ts, dt = timed(lambda: million_kernel_set(args.ranks_kernels))
    n_gpu = sum(len(r.gpu) for r in ts)
    print(f"trace set: {len(ts)} ranks, {n_gpu:,} GPU activities (built in {dt:.1f} s)")
    report, dt = timed(lambda: analyze(ts))
    print(f"analyze (metrics, cross-rank, syncs, findings; what every export needs): {dt:.1f} s wall, "
          f"{CPU['last']:.1f} s CPU, "
          f"{len(report.findings or [])} findings")

    data, t_build = timed(lambda: perfetto_data(ts, report))
    c_build = CPU["last"]
    assert len(data.gpu) == n_gpu
    for name in ("trace.json", "trace.json.gz"):
        _, t_write = timed(lambda n=name: write_perfetto(data, args.out / n))
        print(f"Perfetto {name}: tracks {t_build:.2f} s + write {t_write:.2f} s = {t_build + t_write:.2f} s wall "
              f"({c_build + CPU['last']:.2f} s CPU), "
              f"{mb(args.out / name)} ({len(data.gpu):,} GPU events, {len(data.spans):,} analysis spans, "
              f"{len(data.markers)} markers, {len(data.tracks)} tracks)")
    if not args.skip_naive:
        _, t_naive = timed(lambda: naive_write(data, args.out / "naive.json"))
        c_naive = CPU["last"]
        _, t_write = timed(lambda: write_perfetto(data, args.out / "trace.json"))
        print(f"same events, one dict per event + json.dump: {t_naive:.2f} s wall / {c_naive:.2f} s CPU vs this "
              f"writer {t_write:.2f} s / {CPU['last']:.2f} s ({c_naive / CPU['last']:.1f}x less CPU); "
              f"{mb(args.out / 'naive.json')}")

    timeline, t_tl = timed(lambda: report_timeline(ts, report))
    c_tl = CPU["last"]
    page, t_html = timed(lambda: report_html(ts, report, timeline))
    (args.out / "report.html").write_text(page, encoding="utf-8")
    print(f"HTML report: timeline data {t_tl:.2f} s + page {t_html:.2f} s = {t_tl + t_html:.2f} s wall "
          f"({c_tl + CPU['last']:.2f} s CPU), "
          f"{mb(args.out / 'report.html')} (under 10 MB: {'yes' if len(page.encode()) < 10_000_000 else 'NO'})")
    fig, t_fig = timed(lambda: timeline_of([timeline]))
    png, t_png = timed(lambda: figure_image(fig, "png", width=1600))
    (args.out / "timeline.png").write_bytes(png)
    print(f"PNG timeline: figure {t_fig:.2f} s + kaleido/Chromium {t_png:.2f} s, {len(png) / 1e3:.0f} kB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
