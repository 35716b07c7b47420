"""How long load_nsys takes on a ~100 MB Nsight Systems export, and how much memory it needs.

No public export that large exists, so one is built: the rows of a real export (by default the
2-rank mfu_2gpu_before.sqlite) are replicated into a temporary copy, each copy shifted in time
past the previous one and in correlation id past every id used so far, so that per-process
splits and runtime <-> kernel joins stay what they are in a real, longer run. The string table
is not replicated (a longer run reuses its names). The user's file is never touched.

Each measurement runs in a fresh interpreter, so peak RSS is this load's and nothing else's.

    python benchmarks/bench_nsys_load.py [--target-mb 100] [--repeat 5] [--source FILE] [--keep FILE]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO / "tests/data/public/nsys/mfu_2gpu_before.sqlite.gz"
REPLICATED = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
              "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS")
TIME_COLUMNS = ("start", "end")


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def build_export(source: Path, out: Path, target_bytes: int) -> dict:
    """Copy `source` to `out` and append shifted copies of its event rows until `out` is big enough."""
    if source.name.endswith(".gz"):  # the bundled exports are stored gzipped
        with gzip.open(source, "rb") as fin, out.open("wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
    else:
        shutil.copyfile(source, out)
    out.chmod(0o644)
    conn = sqlite3.connect(out)
    tables = [t for t in REPLICATED if conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (t,)).fetchone()]
    lo = min(conn.execute(f"SELECT min(start) FROM {t}").fetchone()[0] or 0 for t in tables)
    hi = max(conn.execute(f'SELECT max("end") FROM {t}').fetchone()[0] or 0 for t in tables)
    span = hi - lo + 1
    corr_span = 1 + max(conn.execute(f"SELECT max(correlationId) FROM {t}").fetchone()[0] or 0
                        for t in tables if "correlationId" in _columns(conn, t))
    originals = {t: conn.execute(f"SELECT max(rowid) FROM {t}").fetchone()[0] or 0 for t in tables}
    copies = 0
    while out.stat().st_size < target_bytes:
        copies += 1
        for t in tables:
            cols = _columns(conn, t)
            exprs = []
            for c in cols:
                if c in TIME_COLUMNS:
                    exprs.append(f'"{c}" + {copies * span}')
                elif c == "correlationId":
                    exprs.append(f'"{c}" + {copies * corr_span}')
                else:
                    exprs.append(f'"{c}"')
            conn.execute(f'INSERT INTO {t} ({", ".join(chr(34) + c + chr(34) for c in cols)}) '
                         f'SELECT {", ".join(exprs)} FROM {t} WHERE rowid <= {originals[t]}')
        conn.commit()
    rows = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
    conn.close()
    return {"copies": copies + 1, "bytes": out.stat().st_size, "rows": rows}


def _rss_now_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(path: Path, trace_python_heap: bool) -> dict:
    """One load in this (fresh) interpreter: seconds, peak RSS growth, optional Python heap peak."""
    sys.path.insert(0, str(REPO))
    import tracemalloc

    from analyzers.io.nsys import load_nsys

    base = _rss_now_mb()
    if trace_python_heap:
        tracemalloc.start()
    t0 = time.perf_counter()
    traces = load_nsys(path)
    seconds = time.perf_counter() - t0
    heap_peak = tracemalloc.get_traced_memory()[1] / 2**20 if trace_python_heap else None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {
        "seconds": seconds,
        "rss_before_mb": base,
        "peak_rss_mb": peak,
        "peak_rss_growth_mb": peak - base,
        "python_heap_peak_mb": heap_peak,
        "ranks": len(traces),
        "gpu_rows": sum(len(t.gpu) for t in traces),
        "runtime_rows": sum(len(t.runtime) for t in traces),
        "host_op_rows": sum(len(t.host_ops) for t in traces),
        "sync_rows": sum(len(t.sync_events) for t in traces),
    }


def _run_child(path: Path, heap: bool) -> dict:
    cmd = [sys.executable, __file__, "--measure", str(path)] + (["--heap"] if heap else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def machine() -> dict:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import numpy
    import pandas

    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_gib, 1),
            "os": platform.platform(), "python": platform.python_version(), "numpy": numpy.__version__,
            "pandas": pandas.__version__, "sqlite": sqlite3.sqlite_version}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="real export to replicate")
    ap.add_argument("--target-mb", type=float, default=100.0)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep", type=Path, help="also keep the built export here")
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--heap", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.heap)))
        return

    with tempfile.TemporaryDirectory(prefix="bench_nsys_") as tmp:
        big = Path(tmp) / "replicated.sqlite"
        t0 = time.perf_counter()
        built = build_export(args.source, big, int(args.target_mb * 2**20))
        build_s = time.perf_counter() - t0
        if args.keep:
            shutil.copyfile(big, args.keep)
        runs = [_run_child(big, heap=False) for _ in range(args.repeat)]
        heap = _run_child(big, heap=True)
    secs = [r["seconds"] for r in runs]
    growth = [r["peak_rss_growth_mb"] for r in runs]
    result = {
        "machine": machine(),
        "source": str(args.source),
        "export_mb": built["bytes"] / 2**20,
        "copies_of_source": built["copies"],
        "rows": built["rows"],
        "build_seconds": build_s,
        "load_seconds": secs,
        "load_seconds_median": statistics.median(secs),
        "load_seconds_min": min(secs),
        "peak_rss_growth_mb_median": statistics.median(growth),
        "peak_rss_mb_median": statistics.median(r["peak_rss_mb"] for r in runs),
        "python_heap_peak_mb": heap["python_heap_peak_mb"],
        "loaded": {k: runs[0][k] for k in ("ranks", "gpu_rows", "runtime_rows", "host_op_rows", "sync_rows")},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
