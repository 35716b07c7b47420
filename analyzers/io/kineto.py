"""Kineto (torch.profiler export_chrome_trace) JSON loader: .json / .json.gz, pretty or compact.

Decoding is typed (msgspec) and touches only the fields analyses use; every table is then
built column by column into numpy arrays. Float microseconds become int64 nanoseconds once,
here, with rounding.
"""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from analyzers.errors import BadInputError
from analyzers.timeline.collectives import COLLECTIVES, collective_names
from analyzers.timeline.model import (
    HOST_OP_COLUMNS,
    RUNTIME_COLUMNS,
    SYNC_COLUMNS,
    NameTable,
    RankTrace,
    make_gpu_table,
    make_table,
)

RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


class _Args(msgspec.Struct, omit_defaults=True):
    device: Any = None
    stream: Any = None
    correlation: Any = None
    external_id: Any = msgspec.field(name="External id", default=None)
    bytes: Any = None
    collective_name: Any = msgspec.field(name="Collective name", default=None)
    pg_name: Any = msgspec.field(name="Process Group Name", default=None)
    seq: Any = msgspec.field(name="Seq", default=None)
    in_nelems: Any = msgspec.field(name="In msg nelems", default=None)
    dtype: Any = None
    src_device: Any = msgspec.field(name="src device", default=None)
    dst_device: Any = msgspec.field(name="dst device", default=None)


class _Event(msgspec.Struct):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0
    args: _Args | None = None


class _DistInfo(msgspec.Struct):
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    nccl_version: str | None = None


class _Device(msgspec.Struct):
    id: int = 0
    name: str = ""


class _Trace(msgspec.Struct):
    traceEvents: list[_Event] | None = None  # noqa: N815 (Kineto's field name)
    distributedInfo: _DistInfo | None = None  # noqa: N815
    deviceProperties: list[_Device] | None = None  # noqa: N815
    baseTimeNanoseconds: int | None = None  # noqa: N815
    schemaVersion: int | None = None  # noqa: N815


_DECODER = msgspec.json.Decoder(_Trace)

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime",
                # other devices' runtimes (Kineto ActivityType names): read for launch correlation;
                # syncs.py judges host syncs only by CUDA / HIP API names
                "mtia_runtime", "xpu_runtime", "xpu_driver", "privateuse1_runtime", "privateuse1_driver"}
HOST_CATS = {"cpu_op", "user_annotation", "python_function", "operator", "cpu_instant_event"}
SYNC_CATS = {"cuda_sync"}


def read_bytes(path: Path) -> bytes:
    """File contents, gunzipped when gzip (by magic, not by name)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInputError(path, f"cannot read file ({exc.strerror or exc})") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            raise BadInputError(path, f"truncated or corrupt gzip data ({exc})") from None
    return raw


def _ns(values: list[float]) -> np.ndarray:
    """µs floats -> int64 ns. Whole µs convert exactly (epoch µs fit in a double, epoch ns
    do not); only the fraction is scaled, then rounded to the nearest ns."""
    us = np.asarray(values, dtype=np.float64)
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000.0).astype(np.int64)


def _int_or(values: list[Any], fill: int) -> np.ndarray:
    """Integers from decoded JSON values that may be missing, strings ("Spans") or ints."""
    if not values:
        return np.zeros(0, dtype=np.int64)
    try:
        arr = np.asarray(values, dtype=np.int64)  # the common case: all ints
        return arr
    except (TypeError, ValueError, OverflowError):
        pass
    num = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce")
    return num.fillna(fill).to_numpy(dtype=np.float64).astype(np.int64)


def _pid_tid(values: list[int | str]) -> np.ndarray:
    return _int_or(values, -1)


def rank_from_filename(path: Path) -> int | None:
    m = RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


def load_kineto(path: Path, rank: int | None = None) -> RankTrace:
    """Read one Kineto trace file into a RankTrace (rank: distributedInfo, file name, or given)."""
    data = read_bytes(path)
    if not data.strip():
        raise BadInputError(path, "empty file")
    try:
        doc = _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise BadInputError(path, f"not a Kineto trace (unexpected structure: {exc})") from None
    except msgspec.DecodeError as exc:
        problem = "truncated JSON" if "truncated" in str(exc).lower() else f"not valid JSON ({exc})"
        raise BadInputError(path, problem) from None
    if doc.traceEvents is None:
        raise BadInputError(path, "not a Kineto trace: no traceEvents list")
    events = doc.traceEvents

    names = NameTable()
    notes: list[str] = []
    dist = doc.distributedInfo
    if rank is not None:
        rank_source = "given"
    elif dist is not None and dist.rank is not None:
        rank, rank_source = int(dist.rank), "distributedInfo"
    elif (from_name := rank_from_filename(path)) is not None:
        rank, rank_source = from_name, "file name"
    else:
        rank, rank_source = 0, "default"
    world = dist.world_size if dist is not None else None

    by_cat: dict[str, list[_Event]] = {}
    for e in events:
        if e.ph == "X":
            by_cat.setdefault(e.cat, []).append(e)

    gpu_rows = [e for cat in GPU_CATS for e in by_cat.get(cat, [])]
    gpu = _gpu_table(gpu_rows, names)
    runtime_rows = [e for cat in RUNTIME_CATS for e in by_cat.get(cat, [])]
    runtime = _runtime_table(runtime_rows, names)
    host_rows = [(cat, e) for cat in HOST_CATS for e in by_cat.get(cat, [])]
    host_ops = _host_table(host_rows, names)
    sync_rows = [e for cat in SYNC_CATS for e in by_cat.get(cat, [])]
    syncs = _sync_table(sync_rows, names)

    if gpu.empty:
        notes.append("no GPU activity in this trace (was CUDA profiling on?)")
    devices = {d.id: d.name for d in (doc.deviceProperties or [])}
    first_host = runtime_rows[0] if runtime_rows else (host_rows[0][1] if host_rows else None)
    pid = first_host.pid if first_host is not None and isinstance(first_host.pid, int) else -1
    meta = {
        "base_time_ns": doc.baseTimeNanoseconds,
        "schema_version": doc.schemaVersion,
        "backend": dist.backend if dist else None,
        "nccl_version": dist.nccl_version if dist else None,
        "n_events": len(events),
        "runtime_categories": sorted(cat for cat in RUNTIME_CATS if by_cat.get(cat)),
        # HTA 0.5.0 takes GPU-side ProfilerStep annotations for CPU events when it cuts the last step
        # (iterations.like_hta_mask): the latest one's start, if any.
        "gpu_step_annotation_last_start_ns": _last_gpu_step_start(by_cat.get("gpu_user_annotation", [])),
        # HTA rounds events to whole µs only when the trace's timestamps are fractional.
        "fractional_us_timestamps": bool(
            any((tab["start_ns"].to_numpy() % 1000).any() for tab in (gpu, runtime, host_ops))),
    }
    return RankTrace(
        rank=int(rank),
        source=str(path),
        fmt="kineto",
        names=names,
        gpu=gpu,
        runtime=runtime,
        host_ops=host_ops,
        sync_events=syncs,
        world_size=int(world) if world is not None else None,
        rank_source=rank_source,
        pid=pid,
        devices=devices,
        meta=meta,
        notes=notes,
    )


def _last_gpu_step_start(rows: list[_Event]) -> int | None:
    starts = [e.ts for e in rows if "ProfilerStep" in e.name]
    return int(_ns(starts).max()) if starts else None


def _arg(rows: list[_Event], field: str) -> list[Any]:
    return [getattr(e.args, field) if e.args is not None else None for e in rows]


def _gpu_table(rows: list[_Event], names: NameTable):
    n = len(rows)
    if n == 0:
        return make_gpu_table(0)
    start, end = _span(rows)
    kind = [GPU_CATS[e.cat] for e in rows]
    device = _int_or(_arg(rows, "device"), -1)
    tid_fallback = _pid_tid([e.pid for e in rows])
    device = np.where(device >= 0, device, np.maximum(tid_fallback, 0))
    stream = _int_or(_arg(rows, "stream"), -1)
    stream = np.where(stream >= 0, stream, _pid_tid([e.tid for e in rows]))
    coll = _collective_column([e.name for e in rows], _arg(rows, "collective_name"))
    pg = _arg(rows, "pg_name")
    dtype = _arg(rows, "dtype")
    table = make_gpu_table(
        n,
        start_ns=start,
        end_ns=end,
        device=device,
        stream=stream,
        name_id=names.intern_many([e.name for e in rows]),
        kind=kind,
        correlation=_int_or(_arg(rows, "correlation"), -1),
        bytes=_int_or(_arg(rows, "bytes"), -1),
        src_device=_int_or(_arg(rows, "src_device"), -1),
        dst_device=_int_or(_arg(rows, "dst_device"), -1),
        seq=_int_or(_arg(rows, "seq"), -1),
        msg_nelems=_int_or(_arg(rows, "in_nelems"), -1),
        coll_name=coll,
        pg=[str(v) if v is not None else "" for v in pg],
        dtype=[str(v) if v is not None else "" for v in dtype],
    )
    return _by_start(table)


def _collective_column(kernel_names: list[str], from_args: list[Any]) -> np.ndarray:
    """One collective naming for both formats: the kernel name decides (as it does for nsys);
    the profiler's "Collective name" arg ("allreduce", "_allgather_base") fills in otherwise."""
    out = collective_names(kernel_names)
    for i, arg in ((i, a) for i, a in enumerate(from_args) if a and out[i] == ""):
        if arg:
            key = str(arg).lower().strip("_").replace("_", "").removesuffix("base").removesuffix("tensor")
            out[i] = COLLECTIVES.get(key, str(arg))
    return out


def _span(rows: list[_Event]) -> tuple[np.ndarray, np.ndarray]:
    """(start_ns, end_ns) of X events; negative durations count as zero."""
    start = _ns([e.ts for e in rows])
    return start, start + np.maximum(_ns([e.dur for e in rows]), 0)


def _by_start(table: pd.DataFrame) -> pd.DataFrame:
    return table.sort_values("start_ns", kind="stable").reset_index(drop=True)


def _runtime_table(rows: list[_Event], names: NameTable):
    start, end = _span(rows)
    return _by_start(make_table(
        RUNTIME_COLUMNS, len(rows),
        start_ns=start, end_ns=end,
        name_id=names.intern_many([e.name for e in rows]),
        pid=_pid_tid([e.pid for e in rows]), tid=_pid_tid([e.tid for e in rows]),
        correlation=_int_or(_arg(rows, "correlation"), -1),
    ))


def _host_table(rows: list[tuple[str, _Event]], names: NameTable):
    evs = [e for _, e in rows]
    start, end = _span(evs)
    return _by_start(make_table(
        HOST_OP_COLUMNS, len(evs),
        start_ns=start, end_ns=end,
        name_id=names.intern_many([e.name for e in evs]),
        pid=_pid_tid([e.pid for e in evs]), tid=_pid_tid([e.tid for e in evs]),
        correlation=_int_or(_arg(evs, "external_id"), -1),
        kind=np.asarray([c for c, _ in rows], dtype=object),
    ))


def _sync_table(rows: list[_Event], names: NameTable):
    start, end = _span(rows)
    return _by_start(make_table(
        SYNC_COLUMNS, len(rows),
        start_ns=start, end_ns=end,
        device=np.maximum(_int_or(_arg(rows, "device"), 0), 0),
        stream=_int_or(_arg(rows, "stream"), -1),
        name_id=names.intern_many([e.name for e in rows]),
        correlation=_int_or(_arg(rows, "correlation"), -1),
    ))
