"""What the Kineto loader decodes, and how it pulls columns out of the decoded events.

The msgspec structs name only the fields analyses use (everything else in the JSON is skipped
by the decoder). Columns come out with C-level iteration (``np.fromiter(map(attrgetter(...)))``)
and dict hashing, never Python code per event.
"""

from __future__ import annotations

import decimal
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from analyzers.timeline.model import NameTable


class Args(msgspec.Struct, gc=False):
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


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: int | float = 0  # int when the JSON has no fraction: tells whether an exact re-read is needed
    dur: float = 0.0
    args: Args = msgspec.field(default_factory=Args)


class DistInfo(msgspec.Struct):
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    nccl_version: str | None = None


class Device(msgspec.Struct):
    id: int = 0
    name: str = ""


class Trace(msgspec.Struct):
    traceEvents: list[Event] | None = None  # noqa: N815 (Kineto's field name)
    distributedInfo: DistInfo | None = None  # noqa: N815
    deviceProperties: list[Device] | None = None  # noqa: N815
    baseTimeNanoseconds: int | None = None  # noqa: N815
    schemaVersion: int | None = None  # noqa: N815


class ExactTs(msgspec.Struct, gc=False):
    ts: Any = 0


class ExactTrace(msgspec.Struct):
    traceEvents: list[ExactTs] | None = None  # noqa: N815


DECODER = msgspec.json.Decoder(Trace)
# Second, exact pass over timestamps only: untyped floats arrive as Decimal (exact digits).
EXACT_DECODER = msgspec.json.Decoder(ExactTrace, float_hook=decimal.Decimal)

# Lower-case category -> (table, kind). Today's names and the PyTorch <= 1.8 ones.
TABLE_OF_CATEGORY: dict[str, tuple[str, str]] = {
    "kernel": ("gpu", "kernel"),
    "gpu_memcpy": ("gpu", "memcpy"),
    "memcpy": ("gpu", "memcpy"),
    "gpu_memset": ("gpu", "memset"),
    "memset": ("gpu", "memset"),
    "cuda_runtime": ("runtime", ""),
    "cuda_driver": ("runtime", ""),
    "runtime": ("runtime", ""),
    # other devices' runtimes (Kineto ActivityType names): read for launch correlation; host syncs
    # are judged only by CUDA / HIP API names (analyzers/syncs/blocking.py: syncs_not_judged)
    "mtia_runtime": ("runtime", ""),
    "xpu_runtime": ("runtime", ""),
    "xpu_driver": ("runtime", ""),
    "privateuse1_runtime": ("runtime", ""),
    "privateuse1_driver": ("runtime", ""),
    "cpu_op": ("host", "cpu_op"),
    "operator": ("host", "cpu_op"),
    "user_annotation": ("host", "user_annotation"),
    "python_function": ("host", "python_function"),
    "cpu_instant_event": ("host", "cpu_instant_event"),
    "cuda_sync": ("sync", ""),
    # GPU-side annotations: only the ProfilerStep ones are kept, for --like-hta's last-step cut
    "gpu_user_annotation": ("gpu_annotation", ""),
}
# Row order before the stable sort by start: categories in this order, file order within.
CATEGORY_ORDER = {c: i for i, c in enumerate(TABLE_OF_CATEGORY)}
# Above this many µs a double no longer holds a 3-decimal timestamp to the nanosecond
# (2**43 µs: the spacing of doubles there is 2**-9 µs ≈ 1.95 ns; below it, < 1 ns).
EXACT_LIMIT_US = float(2**43)

GET = {f: attrgetter(f) for f in ("ph", "cat", "name", "pid", "tid", "ts", "dur")}
GET_ARG = {f: attrgetter(f"args.{f}") for f in Args.__struct_fields__}


def ns_from_us(us: np.ndarray) -> np.ndarray:
    """µs floats -> int64 ns. Whole µs convert exactly (epoch µs fit in a double, epoch ns
    do not); only the fraction is scaled, then rounded to the nearest ns."""
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000.0).astype(np.int64)


def exact_ns(values: np.ndarray) -> np.ndarray:
    """Decimal / int µs (object array) -> int64 ns, rounded half away from zero, without a
    double in between."""
    if not len(values):
        return np.zeros(0, dtype=np.int64)
    scaled = values * 1000
    magnitude = (np.abs(scaled) + decimal.Decimal("0.5")).astype(np.int64)  # int() truncates
    return magnitude * np.sign(scaled).astype(np.int64)


def column(rows: np.ndarray, getter: attrgetter) -> np.ndarray:
    """One attribute of every row as an object array (C-level iteration)."""
    return np.fromiter(map(getter, rows), dtype=object, count=len(rows))


def floats(rows: np.ndarray, getter: attrgetter) -> np.ndarray:
    return np.fromiter(map(getter, rows), dtype=np.float64, count=len(rows))


def ints(rows: np.ndarray, getter: attrgetter, fill: int) -> np.ndarray:
    """Integer column from values that are usually ints but may be missing or strings ("Spans")."""
    try:
        return np.fromiter(map(getter, rows), dtype=np.int64, count=len(rows))
    except (TypeError, ValueError, OverflowError):
        pass
    num = pd.to_numeric(pd.Series(column(rows, getter), dtype=object), errors="coerce").to_numpy(dtype=np.float64)
    fits = np.isfinite(num) & (np.abs(num) < 2.0**63)  # 1e300 or "inf" would wrap around silently
    return np.where(fits, num, fill).astype(np.int64)


def factorize(col: np.ndarray) -> tuple[np.ndarray, list[Any]]:
    """(codes, distinct values in first-seen order), hashing in C (dict), no per-row Python."""
    uniques = list(dict.fromkeys(col))
    lookup = {u: i for i, u in enumerate(uniques)}
    return np.fromiter(map(lookup.__getitem__, col), dtype=np.int64, count=len(col)), uniques


def intern(names: NameTable, col: np.ndarray) -> np.ndarray:
    """Name ids of a string column (ids given in first-seen order, as NameTable.intern_many)."""
    codes, uniques = factorize(col)
    mapping = np.array([names.intern(str(u)) for u in uniques], dtype=np.int32)
    return mapping[codes] if len(col) else np.zeros(0, dtype=np.int32)


def strings(rows: np.ndarray, getter: attrgetter) -> np.ndarray:
    """String column; null becomes "", anything else its str() (once per distinct value)."""
    if not len(rows):
        return np.zeros(0, dtype=object)
    codes, uniques = factorize(column(rows, getter))
    fixed = np.array(["" if u is None or (isinstance(u, float) and u != u) else u if isinstance(u, str)
                      else str(u) for u in uniques], dtype=object)
    return fixed[codes]
