"""Kineto (torch.profiler export_chrome_trace) JSON loader: .json / .json.gz, pretty or compact.

Cost is kept near the JSON decode floor: msgspec decodes only the fields analyses use, into
slotted structs, and every column is then pulled out with C-level iteration
(``np.fromiter(map(attrgetter(...)))``) and numpy indexing; no Python code runs per event.
Float microseconds become int64 nanoseconds once, here, with rounding; timestamps too large
for a double to hold to the nanosecond (epoch-scale µs with a fraction) are read a second
time as exact decimals, so a fractional-ns timestamp is never quantised.

Category names are matched case-insensitively, and the PyTorch <= 1.8 names (``Kernel``,
``Memcpy``, ``Memset``, ``Runtime``, ``Operator``) map to today's tables.
"""

from __future__ import annotations

import decimal
import gzip
import re
import zlib
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from .collectives import COLLECTIVES, collective_names
from .errors import BadInputError
from .model import (
    HOST_OP_COLUMNS,
    RUNTIME_COLUMNS,
    SYNC_COLUMNS,
    NameTable,
    RankTrace,
    make_gpu_table,
    make_table,
)

RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
# Bumped whenever the tables this loader produces change (the parse cache keys on it).
LOADER_VERSION = 2


class _Args(msgspec.Struct, gc=False):
    """The args analyses read; a missing one decodes to its table's fill (-1 / "")."""

    device: Any = -1
    stream: Any = -1
    correlation: Any = -1
    external_id: Any = msgspec.field(name="External id", default=-1)
    bytes: Any = -1
    collective_name: Any = msgspec.field(name="Collective name", default="")
    pg_name: Any = msgspec.field(name="Process Group Name", default="")
    seq: Any = msgspec.field(name="Seq", default=-1)
    in_nelems: Any = msgspec.field(name="In msg nelems", default=-1)
    dtype: Any = ""
    src_device: Any = msgspec.field(name="src device", default=-1)
    dst_device: Any = msgspec.field(name="dst device", default=-1)


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: int | float = 0  # int when the JSON has no fraction: tells whether an exact re-read is needed
    dur: float = 0.0
    args: _Args = msgspec.field(default_factory=_Args)


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


class _ExactTs(msgspec.Struct, gc=False):
    ts: Any = 0


class _ExactTrace(msgspec.Struct):
    traceEvents: list[_ExactTs] | None = None  # noqa: N815


_DECODER = msgspec.json.Decoder(_Trace)
# Second, exact pass over timestamps only: untyped floats arrive as Decimal (exact digits).
_EXACT_DECODER = msgspec.json.Decoder(_ExactTrace, float_hook=decimal.Decimal)

# Lower-case category -> (table, kind). Today's names and the PyTorch <= 1.8 ones.
_TABLE_OF_CATEGORY: dict[str, tuple[str, str]] = {
    "kernel": ("gpu", "kernel"),
    "gpu_memcpy": ("gpu", "memcpy"),
    "memcpy": ("gpu", "memcpy"),
    "gpu_memset": ("gpu", "memset"),
    "memset": ("gpu", "memset"),
    "cuda_runtime": ("runtime", ""),
    "cuda_driver": ("runtime", ""),
    "runtime": ("runtime", ""),
    "cpu_op": ("host", "cpu_op"),
    "operator": ("host", "cpu_op"),
    "user_annotation": ("host", "user_annotation"),
    "python_function": ("host", "python_function"),
    "cpu_instant_event": ("host", "cpu_instant_event"),
    "cuda_sync": ("sync", ""),
}
# Row order before the stable sort by start: categories in this order, file order within.
_CATEGORY_ORDER = {c: i for i, c in enumerate(_TABLE_OF_CATEGORY)}
# Above this many µs a double no longer holds a 3-decimal timestamp to the nanosecond
# (2**43 µs: the spacing of doubles there is 2**-9 µs ≈ 1.95 ns; below it, < 1 ns).
_EXACT_LIMIT_US = float(2**43)

_get = {f: attrgetter(f) for f in ("ph", "cat", "name", "pid", "tid", "ts", "dur")}
_get_arg = {f: attrgetter(f"args.{f}") for f in _Args.__struct_fields__}


def read_bytes(path: Path) -> bytes | bytearray:
    """File contents, gunzipped (streaming, by magic, not by name) when gzip."""
    try:
        with path.open("rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
            if not gz:
                fh.seek(0)
                return fh.read()
    except OSError as exc:
        raise BadInputError(path, f"cannot read file ({exc.strerror or exc})") from None
    out = bytearray()
    try:
        with gzip.open(path, "rb") as fh:
            while chunk := fh.read(1 << 22):
                out += chunk
    except (EOFError, OSError, zlib.error) as exc:
        raise BadInputError(path, f"truncated or corrupt gzip data ({exc})") from None
    return out


def _ns(us: np.ndarray) -> np.ndarray:
    """µs floats -> int64 ns. Whole µs convert exactly (epoch µs fit in a double, epoch ns
    do not); only the fraction is scaled, then rounded to the nearest ns."""
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000.0).astype(np.int64)


def _exact_ns(values: np.ndarray) -> np.ndarray:
    """Decimal / int µs (object array) -> int64 ns, rounded half away from zero, without a
    double in between."""
    if not len(values):
        return np.zeros(0, dtype=np.int64)
    scaled = values * 1000
    magnitude = (np.abs(scaled) + decimal.Decimal("0.5")).astype(np.int64)  # int() truncates
    return magnitude * np.sign(scaled).astype(np.int64)


def _column(rows: np.ndarray, getter: attrgetter) -> np.ndarray:
    """One attribute of every row as an object array (C-level iteration)."""
    return np.fromiter(map(getter, rows), dtype=object, count=len(rows))


def _floats(rows: np.ndarray, getter: attrgetter) -> np.ndarray:
    return np.fromiter(map(getter, rows), dtype=np.float64, count=len(rows))


def _ints(rows: np.ndarray, getter: attrgetter, fill: int) -> np.ndarray:
    """Integer column from values that are usually ints but may be missing or strings ("Spans")."""
    try:
        return np.fromiter(map(getter, rows), dtype=np.int64, count=len(rows))
    except (TypeError, ValueError, OverflowError):
        pass
    num = pd.to_numeric(pd.Series(_column(rows, getter), dtype=object), errors="coerce")
    return num.fillna(fill).to_numpy(dtype=np.float64).astype(np.int64)


def _factorize(col: np.ndarray) -> tuple[np.ndarray, list[Any]]:
    """(codes, distinct values in first-seen order), hashing in C (dict), no per-row Python."""
    uniques = list(dict.fromkeys(col))
    lookup = {u: i for i, u in enumerate(uniques)}
    return np.fromiter(map(lookup.__getitem__, col), dtype=np.int64, count=len(col)), uniques


def _intern(names: NameTable, col: np.ndarray) -> np.ndarray:
    """Name ids of a string column (ids given in first-seen order, as NameTable.intern_many)."""
    codes, uniques = _factorize(col)
    mapping = np.array([names.intern(str(u)) for u in uniques], dtype=np.int32)
    return mapping[codes] if len(col) else np.zeros(0, dtype=np.int32)


def _strings(rows: np.ndarray, getter: attrgetter) -> np.ndarray:
    """String column; null becomes "", anything else its str() (once per distinct value)."""
    if not len(rows):
        return np.zeros(0, dtype=object)
    codes, uniques = _factorize(_column(rows, getter))
    fixed = np.array(["" if u is None or (isinstance(u, float) and u != u) else u if isinstance(u, str)
                      else str(u) for u in uniques], dtype=object)
    return fixed[codes]


def rank_from_filename(path: Path) -> int | None:
    m = RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


def _decode(path: Path, data: bytes | bytearray) -> _Trace:
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise BadInputError(path, f"not a Kineto trace (unexpected structure: {exc})") from None
    except msgspec.DecodeError as exc:
        problem = "truncated JSON" if "truncated" in str(exc).lower() else f"not valid JSON ({exc})"
        raise BadInputError(path, problem) from None


def load_kineto(path: Path, rank: int | None = None) -> RankTrace:
    """Read one Kineto trace file into a RankTrace (rank: distributedInfo, file name, or given)."""
    data = read_bytes(path)
    if not data or data.isspace():
        raise BadInputError(path, "empty file")
    doc = _decode(path, data)
    if doc.traceEvents is None:
        raise BadInputError(path, "not a Kineto trace: no traceEvents list")
    events = np.fromiter(doc.traceEvents, dtype=object, count=len(doc.traceEvents))
    n_events = len(events)
    doc.traceEvents = None

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

    rows = _select_rows(events)
    used = np.concatenate([idx for idx, _ in rows.values()])
    ts_used = _column(events[used], _get["ts"])  # ints and floats, as written
    ts_us = np.zeros(n_events, dtype=np.float64)
    ts_us[used] = ts_used.astype(np.float64)
    if (len(used) and np.abs(ts_us[used]).max() >= _EXACT_LIMIT_US
            and float in set(map(type, ts_used))):
        start_all = _exact_starts(path, data, n_events)
    else:
        start_all = _ns(ts_us)
    del data, ts_us, ts_used

    def span(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        start = start_all[idx]
        return start, start + np.maximum(_ns(_floats(events[idx], _get["dur"])), 0)

    gpu = _gpu_table(events, rows["gpu"], span, names)
    runtime = _runtime_table(events, rows["runtime"], span, names)
    host_ops = _host_table(events, rows["host"], span, names)
    syncs = _sync_table(events, rows["sync"], span, names)

    if gpu.empty:
        notes.append("no GPU activity in this trace (was CUDA profiling on?)")
    devices = {d.id: d.name for d in (doc.deviceProperties or [])}
    first = rows["runtime"][0] if len(rows["runtime"][0]) else rows["host"][0]
    first_pid = events[first[0]].pid if len(first) else -1
    meta = {
        "base_time_ns": doc.baseTimeNanoseconds,
        "schema_version": doc.schemaVersion,
        "backend": dist.backend if dist else None,
        "nccl_version": dist.nccl_version if dist else None,
        "n_events": n_events,
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
        pid=first_pid if isinstance(first_pid, int) else -1,
        devices=devices,
        meta=meta,
        notes=notes,
    )


def _select_rows(events: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per table: (event indices in table order, kind per row). Complete ("X") events only;
    the category decides the table, case-insensitively; table order is category order, then
    file order (what the stable sort by start keeps for ties)."""
    empty = np.zeros(0, dtype=np.int64)
    out = {t: (empty, np.zeros(0, dtype=object)) for t in ("gpu", "runtime", "host", "sync")}
    if not len(events):
        return out
    cat_codes, cats = _factorize(_column(events, _get["cat"]))
    ph_codes, phs = _factorize(_column(events, _get["ph"]))
    complete = np.asarray([p == "X" for p in phs], dtype=bool)[ph_codes]
    lowered = [str(c).lower() for c in cats]
    for table in out:
        members = [i for i, c in enumerate(lowered) if _TABLE_OF_CATEGORY.get(c, ("", ""))[0] == table]
        if not members:
            continue
        order = np.full(len(cats), -1, dtype=np.int64)
        kinds = np.full(len(cats), "", dtype=object)
        for i in members:
            order[i] = _CATEGORY_ORDER[lowered[i]]
            kinds[i] = _TABLE_OF_CATEGORY[lowered[i]][1]
        rank_of = order[cat_codes]
        idx = np.flatnonzero((rank_of >= 0) & complete)
        idx = idx[np.argsort(rank_of[idx], kind="stable")]
        out[table] = (idx, kinds[cat_codes[idx]])
    return out


def _exact_starts(path: Path, data: bytes | bytearray, n: int) -> np.ndarray:
    """Start times in ns read from the decimal digits themselves (epoch-scale timestamps)."""
    try:
        exact = _EXACT_DECODER.decode(data).traceEvents or []
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise BadInputError(path, f"timestamps cannot be read ({exc})") from None
    values = np.fromiter(map(_get["ts"], exact), dtype=object, count=n)
    bad = [v for v in pd.unique(values) if not isinstance(v, (int, decimal.Decimal))]
    if bad:
        raise BadInputError(path, f"not a Kineto trace: non-numeric ts {bad[0]!r}")
    return _exact_ns(values)


def _sorted_by_start(table: pd.DataFrame) -> pd.DataFrame:
    return table.sort_values("start_ns", kind="stable").reset_index(drop=True)


def _gpu_table(events: np.ndarray, sel: tuple[np.ndarray, np.ndarray], span, names: NameTable):
    idx, kind = sel
    if len(idx) == 0:
        return make_gpu_table(0)
    rows = events[idx]
    start, end = span(idx)
    device = _ints(rows, _get_arg["device"], -1)
    device = np.where(device >= 0, device, np.maximum(_ints(rows, _get["pid"], -1), 0))
    stream = _ints(rows, _get_arg["stream"], -1)
    stream = np.where(stream >= 0, stream, _ints(rows, _get["tid"], -1))
    kernel_names = _column(rows, _get["name"])
    table = make_gpu_table(
        len(idx),
        start_ns=start,
        end_ns=end,
        device=device,
        stream=stream,
        name_id=_intern(names, kernel_names),
        kind=kind,
        correlation=_ints(rows, _get_arg["correlation"], -1),
        bytes=_ints(rows, _get_arg["bytes"], -1),
        src_device=_ints(rows, _get_arg["src_device"], -1),
        dst_device=_ints(rows, _get_arg["dst_device"], -1),
        seq=_ints(rows, _get_arg["seq"], -1),
        msg_nelems=_ints(rows, _get_arg["in_nelems"], -1),
        coll_name=_collective_column(kernel_names, _strings(rows, _get_arg["collective_name"])),
        pg=_strings(rows, _get_arg["pg_name"]),
        dtype=_strings(rows, _get_arg["dtype"]),
    )
    return _sorted_by_start(table)


def _collective_column(kernel_names: np.ndarray, from_args: np.ndarray) -> np.ndarray:
    """One collective naming for both formats: the kernel name decides (as it does for nsys);
    the profiler's "Collective name" arg ("allreduce", "_allgather_base") fills in otherwise."""
    out = collective_names(kernel_names)
    fill = np.flatnonzero((out == "") & (from_args != ""))
    for i in fill:  # only kernels the name did not identify (few)
        arg = str(from_args[i])
        key = arg.lower().strip("_").replace("_", "").removesuffix("base").removesuffix("tensor")
        out[i] = COLLECTIVES.get(key, arg)
    return out


def _runtime_table(events: np.ndarray, sel: tuple[np.ndarray, np.ndarray], span, names: NameTable):
    idx, _ = sel
    rows = events[idx]
    start, end = span(idx)
    return _sorted_by_start(make_table(
        RUNTIME_COLUMNS, len(idx),
        start_ns=start, end_ns=end,
        name_id=_intern(names, _column(rows, _get["name"])),
        pid=_ints(rows, _get["pid"], -1), tid=_ints(rows, _get["tid"], -1),
        correlation=_ints(rows, _get_arg["correlation"], -1),
    ))


def _host_table(events: np.ndarray, sel: tuple[np.ndarray, np.ndarray], span, names: NameTable):
    idx, kind = sel
    rows = events[idx]
    start, end = span(idx)
    return _sorted_by_start(make_table(
        HOST_OP_COLUMNS, len(idx),
        start_ns=start, end_ns=end,
        name_id=_intern(names, _column(rows, _get["name"])),
        pid=_ints(rows, _get["pid"], -1), tid=_ints(rows, _get["tid"], -1),
        correlation=_ints(rows, _get_arg["external_id"], -1),
        kind=kind,
    ))


def _sync_table(events: np.ndarray, sel: tuple[np.ndarray, np.ndarray], span, names: NameTable):
    idx, _ = sel
    rows = events[idx]
    start, end = span(idx)
    return _sorted_by_start(make_table(
        SYNC_COLUMNS, len(idx),
        start_ns=start, end_ns=end,
        device=np.maximum(_ints(rows, _get_arg["device"], 0), 0),
        stream=_ints(rows, _get_arg["stream"], -1),
        name_id=_intern(names, _column(rows, _get["name"])),
        correlation=_ints(rows, _get_arg["correlation"], -1),
    ))
