"""Many-rank memory benchmark: the caller's and each worker's peak RSS, and the JSON's size, at N ranks.

The set: N copies of one real rank (tests/data/public/hta/df_index_resolver.json.gz, a 54 MB Kineto
trace of a V100 job with 2,020 NCCL AllReduce kernels), its distributedInfo block removed so that each
copy takes its rank from its file name (rank0.json ... rankN-1.json). The copies are hard links of one
unpacked file: 1024 ranks cost 54 MB of disk, and every rank is still read and parsed in full.
The set goes under benchmarks/data/ (git-ignored; --clean removes it afterwards).

Runs, one after the other, each as a whole process:
  pool   `overlapscope analyze SET -f json --no-cache --tables DIR` (a local process pool, one worker per core)
  dask   the same with --scheduler: a `dask scheduler` and `--dask-workers` separate `dask worker` processes
         (one process, one thread each) started here and stopped afterwards
Recorded (sampled every 50 ms with psutil): wall time, the caller's peak RSS, the largest peak RSS of any one
worker (pool children, or the dask worker processes), the JSON document's size and the Parquet tables' size.
With --ranks 8,1024 the caller's growth per rank is the difference of the two peaks over the ranks added.
The pool runs go through graph_timing.py (the command unchanged): the per-rank stage's wall time (every file
parsed and analyzed in the workers) beside the graph stage's (the caller's replays, critical path and prices,
plus the per-rank graph builds over the workers), and how many ranks the critical path covers (its per-rank
rows) and how many findings carry a saving. The 1-minute load average is printed beside each run.

With --hostile the set is make_hostile_set.py's instead: every rank written apart, full of what grows the JSON
document (64 streams, 16 process groups, 30 size buckets, 40 sync callers, unmatched and reordered kernels),
for the document's size at any rank count.

usage: python benchmarks/bench_many_ranks.py [--ranks 8,1024] [--modes pool,dask] [--dask-workers 2] [--clean]
       [--source RANK.json | --hostile] [--data DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"
SOURCE = ROOT / "tests" / "data" / "public" / "hta" / "df_index_resolver.json.gz"


def build_set(n: int, source: Path = SOURCE) -> Path:
    """n hard links rank{r}.json of the source rank without its distributedInfo (under DATA, --data)."""
    tag = "" if source == SOURCE else source.name.split(".")[0] + "-" + source.parent.name + "-"
    folder = DATA / f"many-{tag}{n}"
    if (folder / ".complete").exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    base = DATA / f"many-{tag}base.json"
    if not base.exists():
        raw = source.read_bytes()
        raw = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        cut = raw.index(b'"traceEvents"')
        head = json.loads(raw[:cut] + b'"traceEvents": []}')  # the fields before the events (nested ones too)
        if head.pop("distributedInfo", None) is None:
            raise SystemExit("source trace has no distributedInfo to remove")
        del head["traceEvents"]
        base.write_bytes(json.dumps(head)[:-1].encode() + (b", " if head else b"") + raw[cut:])
    for r in range(n):
        os.link(base, folder / f"rank{r}.json")
    (folder / ".complete").touch()
    return folder


def measure(cmd: list[str], worker_roots: list[int] | None = None, env: dict | None = None
            ) -> dict[str, float | str]:
    """Run cmd; peak RSS of the caller, and the largest peak of any one of its children or of the processes
    under worker_roots (the `dask worker` commands: their worker processes are listed again at every poll)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
    caller = psutil.Process(proc.pid)
    peak_caller = peak_worker = 0.0
    out_chunks: list[bytes] = []
    import threading

    reader = threading.Thread(target=lambda: out_chunks.append(proc.stdout.read()), daemon=True)
    reader.start()
    while proc.poll() is None:
        try:
            peak_caller = max(peak_caller, caller.memory_info().rss / 1e6)
            for q in caller.children(recursive=True) + _tree(worker_roots or []):
                try:
                    peak_worker = max(peak_worker, q.memory_info().rss / 1e6)
                except psutil.NoSuchProcess:
                    pass
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    reader.join()
    err = proc.stderr.read().decode(errors="replace").strip().splitlines()
    status = "ok" if proc.returncode == 0 else f"failed (rc {proc.returncode}: {(err or [''])[-1][:160]})"
    out = b"".join(out_chunks)
    covered, priced = _coverage(out) if proc.returncode == 0 else ("–", "–")
    return {"status": status, "wall_s": time.perf_counter() - t0, "caller_peak_mb": peak_caller,
            "worker_peak_mb": peak_worker, "json_mb": len(out) / 1e6, "covered": covered, "priced": priced}


def _coverage(document: bytes) -> tuple[str, str]:
    """How many ranks the critical path has rows for, of how many; how many findings carry a saving, of how many."""
    doc = json.loads(document)
    per_rank = (doc.get("critical_path") or {}).get("per_rank") or {}
    findings = doc.get("findings") or []
    priced = sum(f.get("saving_ns") is not None for f in findings)
    return f"{len(per_rank)} of {len(doc.get('ranks') or [])}", f"{priced} of {len(findings)}"


def _tree(roots: list[int]) -> list[psutil.Process]:
    out = []
    for pid in roots:
        try:
            p = psutil.Process(pid)
            out += [p, *p.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_dask(cmd: list[str], n_workers: int) -> dict[str, float | str]:
    """cmd with --scheduler on a fresh cluster of separate `dask worker` processes."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    bin_dir = Path(sys.executable).parent
    procs = [subprocess.Popen([str(bin_dir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--dashboard-address", ":0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    time.sleep(3)
    for _ in range(n_workers):
        procs.append(subprocess.Popen([str(bin_dir / "dask"), "worker", address, "--nworkers", "1", "--nthreads",
                                       "1", "--memory-limit", "0", "--no-dashboard"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      env={**os.environ, "PYTHONPATH": str(ROOT)}))
    time.sleep(8)
    try:
        return measure(cmd + ["--scheduler", address], [p.pid for p in procs[1:]])
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=30)


def main() -> None:
    global DATA
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="8,1024", help="comma list of set sizes")
    ap.add_argument("--modes", default="pool,dask", help="pool, dask or both")
    ap.add_argument("--dask-workers", type=int, default=2, help="separate `dask worker` processes")
    ap.add_argument("--clean", action="store_true", help="delete benchmarks/data/many-* afterwards")
    ap.add_argument("--source", type=Path, default=SOURCE,
                    help="the rank to copy (.json or .json.gz; default the public 54 MB V100 rank), e.g. a rank "
                         "of a set made with make_large_trace.py")
    ap.add_argument("--hostile", action="store_true", help="make_hostile_set.py's ranks instead of copies of one")
    ap.add_argument("--data", type=Path, default=DATA, help="where the sets are made (default benchmarks/data)")
    a = ap.parse_args()
    DATA = a.data
    print(f"machine: {platform.machine()}, {len(os.sched_getaffinity(0))} cores, "
          f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM, Python {platform.python_version()}")
    print("| ranks | mode | status | wall s | per-rank stage s | graph stage s | caller peak MB "
          "| largest worker peak MB | JSON MB | tables MB | critical path ranks | findings priced | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    try:
        for n in (int(x) for x in a.ranks.split(",")):
            if a.hostile:
                sys.path.insert(0, str(ROOT / "benchmarks"))
                from make_hostile_set import write_set

                folder = write_set(DATA / f"hostile-{n}", n, steps=40)
            else:
                folder = build_set(n, a.source)
            for mode in a.modes.split(","):
                tables = Path(tempfile.mkdtemp(prefix="overlapscope-tables-"))
                cmd = [sys.executable, "-m", "overlapscope", "analyze", str(folder), "-f", "json", "--no-cache",
                       "--tables", str(tables)]
                timing = tables / "timing.json"
                if mode == "pool":
                    r = measure([sys.executable, str(ROOT / "benchmarks" / "graph_timing.py"), str(timing),
                                 *cmd[3:]], env={"PYTHONPATH": str(ROOT)})
                else:
                    r = run_dask(cmd, a.dask_workers)
                t = json.loads(timing.read_text()) if timing.exists() else {}
                timing.unlink(missing_ok=True)
                stage = (f"{t['load_s']:.1f} | {t['caller_graph_s'] + t['worker_graph_s'] / max(t['workers'], 1):.1f}"
                         if t else "– | –")
                r["tables_mb"] = sum(f.stat().st_size for f in tables.rglob("*") if f.is_file()) / 1e6
                shutil.rmtree(tables, ignore_errors=True)
                rows.append((n, mode, r))
                print(f"| {n} | {mode} | {r['status']} | {r['wall_s']:.1f} | {stage} | {r['caller_peak_mb']:.0f} | "
                      f"{r['worker_peak_mb']:.0f} | {r['json_mb']:.2f} | {r['tables_mb']:.1f} | {r['covered']} | "
                      f"{r['priced']} | {os.getloadavg()[0]:.1f} |", flush=True)
    finally:
        if a.clean:
            for f in [*DATA.glob("many-*"), *DATA.glob("hostile-*")]:
                shutil.rmtree(f, ignore_errors=True) if f.is_dir() else f.unlink()
    by_mode: dict[str, list[tuple[int, float]]] = {}
    for n, mode, r in rows:
        if r["status"] == "ok":
            by_mode.setdefault(mode, []).append((n, float(r["caller_peak_mb"])))
    for mode, pts in by_mode.items():
        if len(pts) >= 2:
            (n0, m0), (n1, m1) = min(pts), max(pts)
            print(f"- {mode}: caller peak grows {(m1 - m0) / (n1 - n0):.3f} MB per rank ({n0} -> {n1} ranks)")


if __name__ == "__main__":
    main()
