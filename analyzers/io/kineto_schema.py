"""What the Kineto loader decodes, and how it pulls columns out of the decoded events.

The msgspec structs name only the fields analyses use (everything else in the JSON is skipped
by the decoder). Columns come out in C-level passes, never Python code per event: the events a
table needs are read once each (``transpose``: every field of a struct in one visit, since on a
large trace each visit to a struct is a cache miss, and a pass per column multiplies them), and
values are hashed with dicts once per distinct value.
"""

from __future__ import annotations

import decimal
import gc
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from operator import attrgetter, index
from typing import Any, Literal, Union

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from msgspec.structs import astuple

from analyzers.timeline.model import NameTable


class Args(msgspec.Struct, gc=False, frozen=True):
    """The args analyses read; a missing one decodes to its table's fill (-1 / "").

    Frozen so that events without args share one default instance (fewer objects to make
    and free)."""

    device: Any = -1
    stream: Any = -1
    correlation: Any = -1
    external_id: Any = msgspec.field(name="External id", default=-1)
    bytes: Any = -1
    collective_name: Any = msgspec.field(name="Collective name", default="")
    pg_name: Any = msgspec.field(name="Process Group Name", default="")
    seq: Any = msgspec.field(name="Seq", default=-1)
    in_nelems: Any = msgspec.field(name="In msg nelems", default=-1)
    out_nelems: Any = msgspec.field(name="Out msg nelems", default=-1)
    group_size: Any = msgspec.field(name="Group size", default=-1)
    dtype: Any = ""
    src_device: Any = msgspec.field(name="src device", default=-1)
    dst_device: Any = msgspec.field(name="dst device", default=-1)
    grid: Any = None  # [x, y, z] blocks
    block: Any = None  # [x, y, z] threads
    regs: Any = msgspec.field(name="registers per thread", default=-1)
    smem: Any = msgspec.field(name="shared memory", default=-1)  # bytes per block (static + dynamic)


NO_ARGS = Args()


class _EventFields(msgspec.Struct, gc=False):
    """What the tables read of an event, whichever decoder reads it."""

    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    # int when the JSON has no fraction: tells whether an exact re-read is needed. Missing (or null):
    # None, which the time checks refuse by name (input_limits.check_us_times), never time zero
    ts: int | float | None = None
    # int when whole (what PyTorch writes): most durations are under 257 µs, which Python keeps one
    # object each of, so they cost no allocation, and no freeing (floats: one object per event)
    dur: int | float | None = None
    args: Args = NO_ARGS


class Event(_EventFields, tag_field="ph", tag="X"):
    """A complete ("X") event, the only phase the tables keep. Decoding by phase (a tagged union)
    lets the decoder skip every field of the rest (flow, instant, metadata events: about 40% of a
    PyTorch trace) instead of making strings and structs for them."""


# Every category Kineto writes on complete events (libkineto's ActivityType names; the PyTorch <= 1.8
# ones), as the fast decoder's Literal: the decoder then hands back one shared string per category
# instead of a new one per event (4 ms less per 54 MB rank to make and free). A file with any other
# category is decoded again with `cat` as a plain str (Event): slower, never different.
KNOWN_CATEGORIES = (
    "cpu_op", "user_annotation", "gpu_user_annotation", "gpu_memcpy", "gpu_memset", "kernel",
    "external_correlation", "cuda_runtime", "cuda_driver", "cpu_instant_event", "python_function",
    "overhead", "cuda_sync", "glow_runtime", "mtia_runtime", "mtia_ccp_events", "mtia_insight",
    "cuda_profiler_range", "hpu_op", "xpu_runtime", "xpu_driver", "collective_comm", "gpu_pm_counter",
    "privateuse1_runtime", "privateuse1_driver", "Trace", "Kernel", "Memcpy", "Memset", "Runtime",
    "Operator", "Python",
)


KNOWN_CODE: dict[str | None, int] = {**{c: i for i, c in enumerate(KNOWN_CATEGORIES)}, None: -1}


class KnownCategoryEvent(Event, tag="X"):
    """Event, its category one of KNOWN_CATEGORIES (the first decoder tried, load_kineto)."""

    cat: Literal[KNOWN_CATEGORIES] = "kernel"  # type: ignore[valid-type]


# The Chrome trace format's phases; an event of any other (or no) phase sends the whole file to
# AnyPhaseEvent's decoder (load_kineto), which reads the same fields from every event.
OTHER_PHASES = ("B", "E", "i", "I", "C", "b", "n", "e", "S", "T", "p", "F", "s", "t", "f",
                "P", "N", "O", "D", "M", "V", "v", "R", "c", "(", ")")
# A skipped event answers `cat` with None (a class attribute, not a field): one pass over every event
# reads the complete events' categories and, by their nulls, which events are complete (complete_categories).
SKIPPED = tuple(msgspec.defstruct(f"Phase{i}", [], gc=False, tag_field="ph", tag=ph, namespace={"cat": None})
                for i, ph in enumerate(OTHER_PHASES))
PhaseEvent = Union[(Event, *SKIPPED)]  # noqa: UP007 (a union built from a tuple)
KnownCategoryPhaseEvent = Union[(KnownCategoryEvent, *SKIPPED)]  # noqa: UP007


class AnyPhaseEvent(_EventFields):
    """Any event, its phase read as a plain field: for files whose phases the union does not know."""

    ph: str = ""  # a phase that is no string is refused, as before the union


class DistInfo(msgspec.Struct):
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    nccl_version: str | None = None


class Device(msgspec.Struct):
    """A GPU of the trace: its name and the per-SM limits that say which kernels can run side by side
    (Any: a value of another type makes that limit unknown, not the file unreadable)."""

    id: int = 0
    name: str = ""
    numSms: Any = None  # noqa: N815 (Kineto's field names)
    regsPerMultiprocessor: Any = None  # noqa: N815
    sharedMemPerMultiprocessor: Any = None  # noqa: N815
    maxThreadsPerMultiprocessor: Any = None  # noqa: N815


class Trace(msgspec.Struct):
    traceEvents: list[PhaseEvent] | None = None  # noqa: N815 (Kineto's field name)
    distributedInfo: DistInfo | None = None  # noqa: N815
    deviceProperties: list[Device] | None = None  # noqa: N815
    baseTimeNanoseconds: int | None = None  # noqa: N815
    schemaVersion: int | None = None  # noqa: N815


class KnownCategoryTrace(Trace):
    traceEvents: list[KnownCategoryPhaseEvent] | None = None  # noqa: N815


class AnyPhaseTrace(Trace):
    traceEvents: list[AnyPhaseEvent] | None = None  # noqa: N815


class ExactTs(msgspec.Struct, gc=False):
    ts: Any = 0


class ExactTrace(msgspec.Struct):
    traceEvents: list[ExactTs] | None = None  # noqa: N815


KNOWN_CATEGORY_DECODER = msgspec.json.Decoder(KnownCategoryTrace)
DECODER = msgspec.json.Decoder(Trace)
ANY_PHASE_DECODER = msgspec.json.Decoder(AnyPhaseTrace)
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

# Below this many µs every whole-µs timestamp is a double exactly (2**53), so the ns from the int and
# from the double agree; above it, the double path (and its exact re-read) decides, as before.
WHOLE_EXACT_LIMIT_US = 2**53

ARG_FIELDS = Args.__struct_fields__
GET = {f: attrgetter(f) for f in Event.__struct_fields__}
GET_ARG = {f: attrgetter(f"args.{f}") for f in ARG_FIELDS}


@contextmanager
def gc_paused() -> Iterator[None]:
    """Cyclic GC off while millions of short-lived tuples come and go (each GC pass would visit
    them all, touching every value again); restored as it was, whatever happens."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def transpose(structs: Iterable[msgspec.Struct], fields: tuple[str, ...]) -> dict[str, tuple]:
    """Every field of many structs as columns (tuples), visiting each struct once, in C: cheaper
    than a pass per field when most fields are wanted."""
    cols = list(zip(*map(astuple, structs), strict=True))
    return dict(zip(fields, cols or [()] * len(fields), strict=True))


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


def column(values: Sequence[Any]) -> np.ndarray:
    """Any values as an object array."""
    return np.fromiter(values, dtype=object, count=len(values))


def pluck(structs: Iterable[msgspec.Struct], getter: Callable[[Any], Any]) -> list[Any]:
    """One field of many structs, in one C-level pass (a list is quicker to fill than an array)."""
    return list(map(getter, structs))


def floats(structs: Sequence[msgspec.Struct], getter: Callable[[Any], Any]) -> np.ndarray:
    """A number field as doubles; an integer past any double (hundreds of digits) becomes the largest
    double of its sign, which the time checks then refuse by name (input_limits.check_us_times)."""
    try:
        return np.fromiter(map(getter, structs), dtype=np.float64, count=len(structs))
    except OverflowError:
        return np.array([_double(v) for v in map(getter, structs)], dtype=np.float64)


def _double(value: Any) -> float:
    try:
        return float(value)
    except OverflowError:
        return sys.float_info.max if value > 0 else -sys.float_info.max


def whole_us(structs: Sequence[msgspec.Struct], getter: Callable[[Any], Any]) -> np.ndarray | None:
    """A timestamp field as int64 when every value was written as an integer within
    ±WHOLE_EXACT_LIMIT_US; else None (a value with a fraction, or too wide: the double path decides).
    operator.index refuses floats, which fromiter would truncate."""
    try:
        values = np.fromiter(map(index, map(getter, structs)), dtype=np.int64, count=len(structs))
    except (TypeError, OverflowError):
        return None
    if len(values) and (values.max() >= WHOLE_EXACT_LIMIT_US or values.min() <= -WHOLE_EXACT_LIMIT_US):
        return None
    return values


def ints(structs: Sequence[msgspec.Struct], getter: Callable[[Any], Any], fill: int) -> np.ndarray:
    """Integer field of many structs, usually ints but maybe missing or strings ("Spans")."""
    try:
        return np.fromiter(map(getter, structs), dtype=np.int64, count=len(structs))
    except (TypeError, ValueError, OverflowError):
        return to_ints(pluck(structs, getter), fill)


def to_ints(values: Sequence[Any], fill: int) -> np.ndarray:
    """Integer column from values that are usually ints: anything else is read as a number
    where it is one (in range), else becomes fill."""
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError):
        pass
    num = pd.to_numeric(pd.Series(column(values), dtype=object), errors="coerce").to_numpy(dtype=np.float64)
    fits = np.isfinite(num) & (np.abs(num) < 2.0**63)  # 1e300 or "inf" would wrap around silently
    return np.where(fits, num, fill).astype(np.int64)


def factorize(col: Sequence[Any]) -> tuple[np.ndarray, list[Any]]:
    """(codes, distinct values in first-seen order), hashing in C (dict), no per-row Python."""
    uniques = list(dict.fromkeys(col))
    lookup = {u: i for i, u in enumerate(uniques)}
    return np.fromiter(map(lookup.__getitem__, col), dtype=np.int64, count=len(col)), uniques


def str_codes(structs: Sequence[msgspec.Struct], getter: Callable[[Any], Any]) -> tuple[np.ndarray, list[str]]:
    """A str field of many structs as (codes, distinct values in first-seen order): read straight
    into Arrow and hashed there (the decoder refuses lone surrogates, so every str encodes)."""
    encoded = pc.dictionary_encode(arrow_strings(pluck(structs, getter)))
    return encoded.indices.to_numpy(), encoded.dictionary.to_pylist()


def arrow_strings(values: list[Any]) -> pa.Array:
    """Python strs (or None) as one Arrow array: 32-bit offsets (a fifth quicker to fill), 64-bit
    past 2 GB of text, where Arrow would hand back a chunked array instead."""
    array = pa.array(values, type=pa.string())
    return array if isinstance(array, pa.Array) else pa.array(values, type=pa.large_string())


def complete_categories(events: list[Any], known: bool = False) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(positions of the complete ("X") events, their category codes, the distinct categories in
    first-seen order), from either decoder's events, in C-level passes."""
    if events and isinstance(events[0], AnyPhaseEvent):  # a list holds one decoder's structs only
        complete = np.flatnonzero(np.fromiter(map("X".__eq__, map(attrgetter("ph"), events)), dtype=bool,
                                              count=len(events)))
        codes, cats = str_codes(list(map(events.__getitem__, complete.tolist())), GET["cat"])
        return complete, codes, cats
    if known:  # KnownCategoryEvent's: one shared str per category, so a dict maps them (hashed once each)
        return _known_categories(np.fromiter(map(KNOWN_CODE.__getitem__, map(GET["cat"], events)), dtype=np.int8,
                                             count=len(events)))
    # by-phase structs: a skipped event's category is None (SKIPPED), an X event's always a str
    encoded = pc.dictionary_encode(arrow_strings(pluck(events, GET["cat"])))
    indices = encoded.indices
    complete = np.flatnonzero(indices.is_valid().to_numpy(zero_copy_only=False))
    codes = indices.drop_null().to_numpy()
    return complete, codes, encoded.dictionary.to_pylist()


def _known_categories(fixed: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """complete_categories from each event's index in KNOWN_CATEGORIES (-1: skipped), the codes
    renumbered in first-seen order, as hashing them in file order numbers them."""
    complete = np.flatnonzero(fixed >= 0)
    present = fixed[complete]
    seen, first = np.unique(present, return_index=True)
    in_order = seen[np.argsort(first)]
    renumber = np.zeros(len(KNOWN_CATEGORIES), dtype=np.int64)
    renumber[in_order] = np.arange(len(in_order))
    return complete, renumber[present], [KNOWN_CATEGORIES[int(i)] for i in in_order]


def intern(names: NameTable, codes: np.ndarray, uniques: list[Any]) -> np.ndarray:
    """Name ids of a factorized string column (ids given in first-seen order, as
    NameTable.intern_many)."""
    mapping = np.array([names.intern(str(u)) for u in uniques], dtype=np.int32)
    return mapping[codes] if len(codes) else np.zeros(0, dtype=np.int32)


def strings(values: Sequence[Any]) -> np.ndarray:
    """String column; null becomes "", anything else its str() (once per distinct value)."""
    if not len(values):
        return np.zeros(0, dtype=object)
    codes, uniques = factorize(values)
    fixed = np.array(["" if u is None or (isinstance(u, float) and u != u) else u if isinstance(u, str)
                      else str(u) for u in uniques], dtype=object)
    return fixed[codes]
