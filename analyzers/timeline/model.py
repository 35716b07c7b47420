"""The trace data model every loader fills and every analysis reads.

One RankTrace per rank, columnar pandas tables backed by numpy arrays (never lists of
dicts), times as int64 nanoseconds on the rank's own clock. Names are integer ids into
``RankTrace.names`` so that tables stay numeric and compact.

Tables and their columns (a loader may leave optional columns at their fill value):

``gpu`` — every GPU activity on the device timeline, one row each:
    start_ns, end_ns (int64), device (int32), stream (int64), name_id (int32),
    kind ("kernel" | "memcpy" | "memset", categorical), category ("comm" | "compute" |
    "copy" | "memset" | "other", categorical; filled by classify), correlation (int64,
    -1 unknown), bytes (int64, -1 unknown), src_device / dst_device (int32, -1 unknown),
    coll_name (str, "" unknown), pg (process-group name, str), seq (int64, -1 unknown),
    msg_nelems / out_nelems (int64, -1: the profiler's "In msg nelems" / "Out msg nelems"),
    group_size (int64, -1: the process group's size), dtype (str).
    Kernels, copies and sets share one table because overlap is a property of the GPU
    timeline, whatever kind of activity fills it; ``kernels``/``copies``/``sets`` are views.
``runtime`` — host CUDA API calls: start_ns, end_ns, name_id, pid, tid, correlation.
``host_ops`` — CPU operators, user annotations, NVTX ranges: start_ns, end_ns, name_id,
    pid, tid, kind ("cpu_op" | "user_annotation" | "nvtx" | "python" | ...), correlation
    (external id linking to runtime calls, -1 unknown).
``sync_events`` — GPU-side synchronization records (Kineto ``cuda_sync``, nsys
    SYNCHRONIZATION): start_ns, end_ns, device, stream, name_id, correlation.

A per-rank worker whose caller reads only the GPU table and the per-rank results (`overlapscope
analyze`: analyzers.report.RankStage) keeps the host tables, ``runtime``, ``host_ops`` and
``sync_events`` (two thirds of a Kineto rank's bytes; the caller reads the blocking syncs the worker
found), and sends the trace back without them (``without_host_tables``). Every reader of those tables
calls ``require_host_tables`` first, so such a trace fails loudly instead of being read as if it had no
host activity.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

CATEGORIES = ("comm", "compute", "copy", "memset", "other")
GPU_KINDS = ("kernel", "memcpy", "memset")

GPU_COLUMNS: dict[str, Any] = {
    "start_ns": np.int64,
    "end_ns": np.int64,
    "device": np.int32,
    "stream": np.int64,
    "name_id": np.int32,
    "correlation": np.int64,
    "bytes": np.int64,
    "src_device": np.int32,
    "dst_device": np.int32,
    "seq": np.int64,
    "msg_nelems": np.int64,
    "out_nelems": np.int64,
    "group_size": np.int64,
    # kernels: what they hold on an SM (timeline.sm_resources); -1 unknown and for copies / memsets
    "blocks": np.int64,
    "threads": np.int32,
    "regs": np.int32,
    "smem": np.int32,
}
GPU_STRING_COLUMNS = ("coll_name", "pg", "dtype")
RUNTIME_COLUMNS: dict[str, Any] = {
    "start_ns": np.int64,
    "end_ns": np.int64,
    "name_id": np.int32,
    "pid": np.int64,
    "tid": np.int64,
    "correlation": np.int64,
}
HOST_OP_COLUMNS: dict[str, Any] = {
    "start_ns": np.int64,
    "end_ns": np.int64,
    "name_id": np.int32,
    "pid": np.int64,
    "tid": np.int64,
    "correlation": np.int64,
}
SYNC_COLUMNS: dict[str, Any] = {
    "start_ns": np.int64,
    "end_ns": np.int64,
    "device": np.int32,
    "stream": np.int64,
    "name_id": np.int32,
    "correlation": np.int64,
}


class NameTable:
    """Interns strings to dense integer ids (the `names` string table)."""

    def __init__(self, names: list[str] | None = None) -> None:
        self.names: list[str] = list(names or [])
        self._ids: dict[str, int] = {n: i for i, n in enumerate(self.names)}

    def intern(self, name: str) -> int:
        found = self._ids.get(name)
        if found is None:
            found = len(self.names)
            self.names.append(name)
            self._ids[name] = found
        return found

    def intern_many(self, names: list[str]) -> np.ndarray:
        """Ids for many names at once (pandas factorize, then merge into the table)."""
        if len(names) == 0:
            return np.zeros(0, dtype=np.int32)
        codes, uniques = pd.factorize(pd.Series(names, dtype=object), use_na_sentinel=False)
        mapping = np.array([self.intern(str(u)) for u in uniques], dtype=np.int32)
        return mapping[codes]

    def __getitem__(self, i: int) -> str:
        return self.names[i]

    def __len__(self) -> int:
        return len(self.names)


def _empty_frame(columns: dict[str, Any], extra: dict[str, Any] | None = None) -> pd.DataFrame:
    data = {c: np.zeros(0, dtype=t) for c, t in columns.items()}
    for c, v in (extra or {}).items():
        data[c] = v
    return pd.DataFrame(data)


def make_gpu_table(n: int = 0, **cols: Any) -> pd.DataFrame:
    """Build a `gpu` table with every column present and typed; missing columns get fills."""
    fills = {"correlation": -1, "bytes": -1, "src_device": -1, "dst_device": -1, "seq": -1,
             "msg_nelems": -1, "out_nelems": -1, "group_size": -1, "device": 0, "stream": 0,
             "blocks": -1, "threads": -1, "regs": -1, "smem": -1}
    data: dict[str, Any] = {}
    for c, t in GPU_COLUMNS.items():
        if c in cols:
            data[c] = np.asarray(cols[c], dtype=t)
        else:
            data[c] = np.full(n, fills.get(c, 0), dtype=t)
    for c in GPU_STRING_COLUMNS:
        v = cols.get(c)
        data[c] = np.asarray(v, dtype=object) if v is not None else np.full(n, "", dtype=object)
    kind = cols.get("kind")
    data["kind"] = pd.Categorical(kind if kind is not None else ["kernel"] * n, categories=GPU_KINDS)
    cat = cols.get("category")
    data["category"] = pd.Categorical(cat if cat is not None else ["other"] * n, categories=CATEGORIES)
    return pd.DataFrame(data)


def make_table(columns: dict[str, Any], n: int = 0, fills: dict[str, Any] | None = None,
               **cols: Any) -> pd.DataFrame:
    """Build a typed table for `runtime`, `host_ops` or `sync_events` (extra columns kept)."""
    fills = {"correlation": -1, "pid": 0, "tid": 0, "device": 0, "stream": 0, **(fills or {})}
    data: dict[str, Any] = {}
    for c, t in columns.items():
        data[c] = np.asarray(cols.pop(c), dtype=t) if c in cols else np.full(n, fills.get(c, 0), dtype=t)
    for c, v in cols.items():
        data[c] = v
    return pd.DataFrame(data)


@dataclass
class RankTrace:
    """Everything one rank's trace says, in columnar tables (see module docstring)."""

    rank: int
    source: str
    fmt: str  # "kineto" | "nsys" | "synthetic"
    names: NameTable
    gpu: pd.DataFrame
    runtime: pd.DataFrame = field(default_factory=lambda: _empty_frame(RUNTIME_COLUMNS))
    host_ops: pd.DataFrame = field(
        default_factory=lambda: _empty_frame(HOST_OP_COLUMNS, {"kind": np.zeros(0, dtype=object)}))
    sync_events: pd.DataFrame = field(default_factory=lambda: _empty_frame(SYNC_COLUMNS))
    world_size: int | None = None
    rank_source: str = "unknown"  # where the rank number came from: distributedInfo, file name, ...
    hostname: str = ""
    pid: int = -1
    devices: dict[int, str] = field(default_factory=dict)  # device id -> GPU name
    meta: dict[str, Any] = field(default_factory=dict)  # run ids, tool versions, base time ...
    notes: list[str] = field(default_factory=list)  # degraded analyses, missing tables
    # (runtime rows, host_ops rows, sync_events rows) when a per-rank worker kept those tables
    # (without_host_tables); the three fields then hold empty tables
    host_rows_kept_in_worker: tuple[int, int, int] | None = None

    # Views the design names separately.
    @property
    def kernels(self) -> pd.DataFrame:
        return self.gpu[self.gpu["kind"] == "kernel"]

    @property
    def copies(self) -> pd.DataFrame:
        return self.gpu[self.gpu["kind"] == "memcpy"]

    @property
    def sets(self) -> pd.DataFrame:
        return self.gpu[self.gpu["kind"] == "memset"]

    def name_of(self, name_id: int) -> str:
        return self.names[int(name_id)]

    def names_of(self, name_ids: np.ndarray) -> np.ndarray:
        """Vectorized id -> string (object array)."""
        table = np.asarray(self.names.names, dtype=object)
        return table[np.asarray(name_ids, dtype=np.int64)] if len(table) else np.zeros(0, dtype=object)

    @property
    def label(self) -> str:
        return f"rank {self.rank}"

    def gpu_checksum(self) -> int:
        """gpu_table_checksum of this trace's GPU table (a packed trace answers without unpacking it)."""
        return gpu_table_checksum(self.gpu)

    def host_row_counts(self) -> tuple[int, int, int]:
        """Rows of runtime, host_ops and sync_events as loaded, whether or not the tables came back from the
        worker."""
        return self.host_rows_kept_in_worker or (len(self.runtime), len(self.host_ops), len(self.sync_events))


def gpu_table_checksum(gpu: pd.DataFrame) -> int:
    """CRC-32 of what per-rank results depend on in a GPU table: its times, streams, names and categories
    (over the columns' bytes: 3x quicker than hashing rows with pandas; the same in every process, so a Dask
    worker's results match the caller's tables), mixed with its row count."""
    crc = 0
    for c in ("start_ns", "end_ns", "stream", "name_id"):
        crc = zlib.crc32(np.ascontiguousarray(gpu[c].to_numpy()), crc)
    category = gpu["category"]
    if not len(gpu):  # no rows, no categories: an empty table is the same whatever dtype it was shipped with
        pass
    elif isinstance(category.dtype, pd.CategoricalDtype):
        crc = zlib.crc32(np.ascontiguousarray(category.cat.codes.to_numpy()), crc)
        crc = zlib.crc32(repr(tuple(category.cat.categories)).encode(), crc)
    else:
        crc = zlib.crc32(np.ascontiguousarray(pd.util.hash_array(category.to_numpy(dtype=object))), crc)
    return hash((crc, len(gpu)))


class HostTablesLeftInWorker(RuntimeError):
    """An analysis needs a rank's host tables, which its per-rank worker kept: a programming error
    (the set was loaded for `analyze` with one set of options and is analyzed otherwise)."""


def require_host_tables(trace: RankTrace) -> None:
    """Call before reading trace.runtime or trace.host_ops: they must be the tables as loaded."""
    if trace.host_rows_kept_in_worker is not None:
        raise HostTablesLeftInWorker(
            f"{trace.label} ({trace.source}): its runtime and host-op tables stayed in the per-rank worker; "
            "load the set with the options it is analyzed with, or with RankStage(send_host_tables=True)")


def without_host_tables(trace: RankTrace) -> RankTrace:
    """The trace with empty runtime, host_ops and sync_events tables, their row counts kept (table_fingerprint)."""
    if trace.host_rows_kept_in_worker is not None:
        return trace
    return replace(trace, runtime=trace.runtime.iloc[:0], host_ops=trace.host_ops.iloc[:0],
                   sync_events=trace.sync_events.iloc[:0], host_rows_kept_in_worker=trace.host_row_counts())


@dataclass
class TraceSet:
    """The traces of one run: one RankTrace per rank plus run-level metadata."""

    ranks: dict[int, RankTrace]
    label: str = ""
    fmt: str = ""
    world_size: int | None = None
    clock_offsets_ns: dict[int, int] = field(default_factory=dict)  # applied offsets, per rank
    notes: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def sources(self) -> list[str]:
        return sorted({t.source for t in self.ranks.values()})

    def rank_ids(self) -> list[int]:
        return sorted(self.ranks)

    def __iter__(self):
        return (self.ranks[r] for r in self.rank_ids())

    def __len__(self) -> int:
        return len(self.ranks)
