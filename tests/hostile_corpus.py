"""Builders of the round-three hostile corpus (tests/test_hostile_round3_*.py): sample sets moved in
time, nsys exports with rows a reader must count or refuse. Each writes into a folder it is given and
reads only files of this repository."""

from __future__ import annotations

import gzip
import json
import math
import shutil
import sqlite3
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
# 1e13 µs = 1e16 ns (about 116 days): every sample's clock (1e12..5e12 µs) ends up negative.
SHIFT_US = 10**13
SHIFT_NS = SHIFT_US * 1000
TIME_COLUMNS = ("start", "end", "timestamp")


def shift_kineto(src: Path, dst: Path, by_us: int = SHIFT_US) -> None:
    """A Kineto file with every event's ts (and the base time) moved by -by_us."""
    opener = gzip.open if src.name.endswith(".gz") else open
    with opener(src, "rt") as fh:
        doc = json.load(fh)
    for event in doc["traceEvents"]:
        if "ts" in event:
            event["ts"] = event["ts"] - by_us
    if "baseTimeNanoseconds" in doc:
        doc["baseTimeNanoseconds"] -= by_us * 1000
    dst.write_text(json.dumps(doc))


def shift_sqlite(src: Path, dst: Path, by_ns: int = SHIFT_NS) -> None:
    """An nsys export with every start / end / timestamp column of every table moved by -by_ns."""
    shutil.copy(src, dst)
    con = sqlite3.connect(dst)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
            sets = [f'"{c}" = "{c}" - {int(by_ns)}' for c in cols if c in TIME_COLUMNS]
            if sets:
                con.execute(f'UPDATE "{table}" SET {", ".join(sets)}')
        con.commit()
    finally:
        con.close()


def shifted_set(src: Path, dst: Path) -> Path:
    """Every rank file of a sample set moved to negative time (manifest left out: it names the originals; so are
    Execution Traces, rank{R}.et.json.gz, which hold no times)."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        if f.name.startswith("rank") and f.name.endswith((".json", ".json.gz")) and ".et." not in f.name:
            shift_kineto(f, dst / f.name.removesuffix(".gz"))
        elif f.suffix == ".sqlite":
            shift_sqlite(f, dst / f.name)
    return dst


def time_diffs(a: Any, b: Any, shift: int = SHIFT_NS, path: str = "") -> list[str]:
    """Where two analysis documents differ beyond the shift: every number equal, or (an absolute time)
    equal plus the shift, within 2 ns (float64 holds a time near 1e16 ns to 2 ns; Kineto's µs round
    to ns at load); file names and labels skipped."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        out: list[str] = []
        for k in a:
            if k not in ("source", "sources", "label", "sqlite"):
                out += time_diffs(a[k], b[k], shift, f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items vs {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in time_diffs(x, y, shift, f"{path}[{i}]")]
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        same = math.isclose(a, b, rel_tol=1e-6, abs_tol=2) or abs((a - b) - shift) <= 2
        return [] if same else [f"{path}: {a} vs {b}"]
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


# --------------------------------------------------------------------------- nsys exports with hostile rows
VM = 1 << 48
INT64_MAX = (1 << 63) - 1
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"


def gpid(pid: int) -> int:
    return VM | (pid << 24)


def write_nsys(path: Path, kernels: list[dict[str, Any]], strings: dict[int, str], *, pids: tuple[int, ...] = (200,),
               ) -> Path:
    """An export whose kernel names are StringIds ids (as nsys writes them). Each kernel: start, end, name_id,
    and optionally stream, pid (None: a NULL globalPid), launched_by (the pid whose cudaLaunchKernel record it
    gets: default its own pid; None: no launch record). Every pid in `pids` makes one API call of its own."""
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, contextId INT, streamId INT,
            correlationId INT, globalPid INT, demangledName INT, shortName INT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, eventClass INT, globalTid INT,
            correlationId INT, nameId INT);
    """)
    launch_id = 1_000_000
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [*strings.items(), (launch_id, "cudaLaunchKernel_v7000")])
    corr = 0
    for k in kernels:
        corr += 1
        pid = k.get("pid", pids[0])
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, ?, ?, ?, ?, ?)",
                    (k["start"], k["end"], k.get("stream", 7), corr, None if pid is None else gpid(pid),
                     k["name_id"], k["name_id"]))
        owner = k.get("launched_by", pid if pid is not None else pids[0])
        if owner is not None and isinstance(k["start"], int) and -INT64_MAX + 10_000 < k["start"] < INT64_MAX - 10_000:
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, ?)",
                        (k["start"] - 5_000, k["start"] - 3_000, gpid(owner) | 1, corr, launch_id))
    for p in pids:
        corr += 1
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (1, 2, 1, ?, ?, ?)", (gpid(p) | 1, corr, launch_id))
    con.commit()
    con.close()
    return path
