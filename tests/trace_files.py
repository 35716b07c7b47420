"""Small trace files that tests write themselves: Kineto JSON and Nsight Systems SQLite exports.

The edge-case tests (test_edges, test_precision) go through the public entry
points (load_traces, analyze, the CLI), so they need files, not in-memory tables. Times are
given in whole microseconds (Kineto's unit) and written as such; nsys exports take nanoseconds.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NCCL_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"


@dataclass
class Kineto:
    """A Kineto (torch.profiler) trace built event by event; times in µs."""

    rank: int | None = None
    world_size: int | None = None
    pid: int = 100
    tid: int = 101
    events: list[dict[str, Any]] = field(default_factory=list)
    corr: int = 0
    runtime_cat: str = "cuda_runtime"
    extra: dict[str, Any] = field(default_factory=dict)

    def _x(self, cat: str, name: str, ts: float, dur: float, pid: Any, tid: Any, **args: Any) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                            "args": args})

    def kernel(self, start: float, end: float, name: str = GEMM, *, launch: float | None = None,
               stream: int = 7, device: int = 0, **args: Any) -> int:
        """A kernel on the GPU, launched by a cudaLaunchKernel at `launch` (None: no launch record);
        `args` go into its args (e.g. **{"In msg nelems": 1024})."""
        self.corr += 1
        self._x("kernel", name, start, end - start, device, stream, device=device, stream=stream,
                correlation=self.corr, **args)
        if launch is not None:
            self._x(self.runtime_cat, "cudaLaunchKernel", launch, 2, self.pid, self.tid, correlation=self.corr)
        return self.corr

    def call(self, name: str, start: float, end: float, *, corr: int | None = None, tid: int | None = None) -> int:
        """A runtime call (a sync, a copy); its own correlation id unless given."""
        if corr is None:
            self.corr += 1
            corr = self.corr
        self._x(self.runtime_cat, name, start, end - start, self.pid, self.tid if tid is None else tid,
                correlation=corr)
        return corr

    def op(self, name: str, start: float, end: float, cat: str = "cpu_op") -> None:
        self._x(cat, name, start, end - start, self.pid, self.tid)

    def step(self, n: int, start: float, end: float) -> None:
        self.op(f"ProfilerStep#{n}", start, end, cat="user_annotation")

    def gpu_annotation(self, name: str, start: float, end: float, *, stream: int = 7, device: int = 0,
                       **args: Any) -> None:
        """A GPU-side user annotation (Kineto ``gpu_user_annotation``), e.g. a ProfilerStep on the GPU."""
        self._x("gpu_user_annotation", name, start, end - start, device, stream, device=device, **args)

    def doc(self) -> dict[str, Any]:
        d: dict[str, Any] = {"schemaVersion": 1, "traceEvents": self.events, **self.extra}
        if self.rank is not None:
            d["distributedInfo"] = {"rank": self.rank, "world_size": self.world_size or 1, "backend": "nccl"}
        return d

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(self.doc()))
        return path


VM = 1 << 48


def gpid(pid: int) -> int:
    return VM | (pid << 24)


def gtid(pid: int, tid: int) -> int:
    return gpid(pid) | tid


@dataclass
class Nsys:
    """A minimal Nsight Systems SQLite export (the tables the loader reads); times in ns."""

    pid: int = 200
    tid: int = 201
    kernels: list[tuple] = field(default_factory=list)
    memcpys: list[tuple] = field(default_factory=list)
    runtime: list[tuple] = field(default_factory=list)
    nvtx: list[tuple] = field(default_factory=list)
    strings: dict[str, int] = field(default_factory=dict)
    corr: int = 0

    def sid(self, text: str) -> int:
        return self.strings.setdefault(text, len(self.strings) + 1)

    def kernel(self, start: int, end: int, name: str = GEMM, *, launch: int | None = None, stream: int = 7) -> int:
        self.corr += 1
        self.kernels.append((start, end, 0, 1, stream, self.corr, gpid(self.pid), name, name.split("(")[0]))
        if launch is not None:
            self.call("cudaLaunchKernel_v7000", launch, launch + 2_000, corr=self.corr)
        return self.corr

    def memcpy(self, start: int, end: int, *, copy_kind: int = 2, corr: int, stream: int = 7) -> None:
        """A copy on the GPU (copyKind 2: device to host)."""
        self.memcpys.append((start, end, 0, stream, corr, gpid(self.pid), 4096, copy_kind, 2, 0, 0, 0))

    def call(self, name: str, start: int, end: int, *, corr: int | None = None, tid: int | None = None) -> int:
        if corr is None:
            self.corr += 1
            corr = self.corr
        self.runtime.append((start, end, 1, gtid(self.pid, self.tid if tid is None else tid), corr, self.sid(name)))
        return corr

    def range(self, text: str, start: int, end: int) -> None:
        self.nvtx.append((start, end, 59, text, gtid(self.pid, self.tid), None))

    def write(self, path: Path) -> Path:
        conn = sqlite3.connect(path)
        conn.executescript("""
            CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT NOT NULL, end INT NOT NULL, deviceId INT,
                contextId INT, streamId INT, correlationId INT, globalPid INT, demangledName TEXT, shortName TEXT);
            CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, end INT, deviceId INT, streamId INT,
                correlationId INT, globalPid INT, bytes INT, copyKind INT, srcKind INT, dstKind INT,
                srcDeviceId INT, dstDeviceId INT);
            CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, eventClass INT, globalTid INT,
                correlationId INT, nameId INT);
            CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, text TEXT, globalTid INT, jsonText TEXT);
        """)
        conn.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in self.strings.items()])
        conn.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * 9)})", self.kernels)
        conn.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES ({', '.join('?' * 12)})", self.memcpys)
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?)", self.runtime)
        conn.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?)", self.nvtx)
        conn.commit()
        conn.close()
        return path


def kineto_x(cat: str, name: str, ts: float, dur: float, tid: int, **args) -> dict:
    """One complete ("X") Kineto event: GPU rows (kernel, cuda_sync) on pid 0 with the stream as tid, host rows on
    pid 1000; args as given (correlation, stream, device, ...)."""
    return {"ph": "X", "cat": cat, "name": name, "pid": 0 if cat in ("kernel", "cuda_sync") else 1000, "tid": tid,
            "ts": ts, "dur": dur, "args": args}
