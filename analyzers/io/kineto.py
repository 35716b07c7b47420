"""Kineto (torch.profiler export_chrome_trace) JSON loader: .json / .json.gz, pretty or compact.

Cost is kept near the JSON decode floor: msgspec decodes only the fields analyses use, into
slotted structs. One pass over every event's category (hashed by Arrow; an event of another
phase than complete answers None, kineto_schema.SKIPPED) sorts the complete events into tables;
each table then reads only the fields it keeps, one C-level pass per field over a list (the GPU
args, most of which are kept, in a single visit: kineto_schema.transpose), and numpy converts,
sorts and indexes. No Python code runs per event, and the cyclic GC is paused meanwhile
(nothing made here forms cycles).
Whole microseconds (what PyTorch writes) become int64 nanoseconds exactly; float microseconds
once, here, with rounding; timestamps too large
for a double to hold to the nanosecond (epoch-scale µs with a fraction) are read a second
time as exact decimals, so a fractional-ns timestamp is never quantised.

Category names are matched case-insensitively, and the PyTorch <= 1.8 names (``Kernel``,
``Memcpy``, ``Memset``, ``Runtime``, ``Operator``) map to today's tables.
"""

from __future__ import annotations

import decimal
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from analyzers.errors import BadInputError
from analyzers.io.input_limits import check_event_bytes, check_event_count, check_us_times, json_problem
from analyzers.io.kineto_schema import (
    ANY_PHASE_DECODER,
    ARG_FIELDS,
    CATEGORY_ORDER,
    DECODER,
    EXACT_DECODER,
    EXACT_LIMIT_US,
    GET,
    GET_ARG,
    KNOWN_CATEGORY_DECODER,
    TABLE_OF_CATEGORY,
    KnownCategoryTrace,
    Trace,
    column,
    complete_categories,
    exact_ns,
    floats,
    gc_paused,
    intern,
    ints,
    ns_from_us,
    pluck,
    str_codes,
    strings,
    to_ints,
    transpose,
    whole_us,
)
from analyzers.io.trace_bytes import TraceBytes, blank, read_bytes
from analyzers.io.worker_memory import hold_arenas
from analyzers.timeline.collectives import COLLECTIVES, collective_names
from analyzers.timeline.model import (
    CATEGORIES,
    GPU_KINDS,
    HOST_OP_COLUMNS,
    RUNTIME_COLUMNS,
    SYNC_COLUMNS,
    NameTable,
    RankTrace,
    make_gpu_table,
    make_table,
)
from analyzers.timeline.sm_resources import META_KEY, device_limits, dims_product

RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
# Bumped whenever the tables this loader produces change (the parse cache keys on it).
# 4: input limits (bounded gzip, refused times), out-of-range int args; 5: Out msg nelems, Group size;
# 6: events without a time refused; 7: kernels' grid, block, registers and shared memory, SM limits
LOADER_VERSION = 7


def rank_from_filename(path: Path) -> int | None:
    m = RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


def _decode(path: Path, data: TraceBytes) -> Trace:
    """By phase, the categories Kineto writes first (kineto_schema.KNOWN_CATEGORIES), then any
    category; an unknown or missing phase, or a real structure problem, goes to the permissive
    decoder, which says what is wrong."""
    for decoder in (KNOWN_CATEGORY_DECODER, DECODER):
        try:
            return decoder.decode(data)
        except msgspec.ValidationError:
            pass
        except msgspec.DecodeError as exc:
            raise BadInputError(path, json_problem(data, str(exc))) from None
    try:
        return ANY_PHASE_DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise BadInputError(path, f"not a Kineto trace (unexpected structure: {exc})") from None
    except msgspec.DecodeError as exc:
        raise BadInputError(path, json_problem(data, str(exc))) from None


TABLES = ("gpu", "runtime", "host", "sync", "gpu_annotation")


def _no_rows() -> np.ndarray:
    return np.zeros(0, dtype=np.int64)


@dataclass
class _Rows:
    """One table's events in table order (category order, then file order): their indices in
    the event list, the events themselves, kind per row; then the columns every table has."""

    idx: np.ndarray = field(default_factory=_no_rows)
    events: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=object))  # to index
    listed: list[Any] = field(default_factory=list)  # the same, to iterate (quicker over a list)
    kind_codes: np.ndarray = field(default_factory=_no_rows)  # kind, factorized
    kinds: list[str] = field(default_factory=list)
    name_codes: np.ndarray = field(default_factory=_no_rows)  # names, factorized in table order
    name_uniques: list[str] = field(default_factory=list)
    start: np.ndarray = field(default_factory=_no_rows)
    end: np.ndarray = field(default_factory=_no_rows)

    def __len__(self) -> int:
        return len(self.idx)

    def sort_by_start(self) -> None:
        """Rows in start order, ties in table order (what a stable sort of the table would give);
        the distinct names keep their table-order ranking, which decides name ids."""
        order = np.argsort(self.start, kind="stable")
        for name in ("idx", "events", "kind_codes", "name_codes", "start", "end"):
            setattr(self, name, getattr(self, name)[order])
        self.listed = self.events.tolist()

    def kind_column(self) -> pd.api.extensions.ExtensionArray | np.ndarray:
        """The kind strings as the array pandas would infer for them, built from the distinct ones
        (an empty column stays object, as pandas leaves it)."""
        if not len(self):
            return np.zeros(0, dtype=object)
        return pd.Series(np.asarray(self.kinds, dtype=object)).array.take(self.kind_codes)


def load_kineto(path: Path, rank: int | None = None) -> RankTrace:
    """Read one Kineto trace file into a RankTrace (rank: distributedInfo, file name, or given)."""
    data = read_bytes(path)
    if blank(data):
        raise BadInputError(path, "empty file")
    check_event_bytes(data)  # InputLimitErrors are named with the file by load.load_file, as the time checks'
    with gc_paused():  # what comes and goes below holds no cycles; GC passes would only touch it all again
        doc = _decode(path, data)
        if doc.traceEvents is None:
            raise BadInputError(path, "not a Kineto trace: no traceEvents list")
        listed, doc.traceEvents = doc.traceEvents, None
        check_event_count(len(listed))
        hold_arenas(listed)  # a pool worker's next file reuses these arenas (worker_memory)
        events = np.fromiter(listed, dtype=object, count=len(listed))
        rows, runtime_cats = _select_rows(listed, events, isinstance(doc, KnownCategoryTrace))
        del listed
        first = rows["runtime"] if len(rows["runtime"]) else rows["host"]
        first_pid = first.events[0].pid if len(first) else -1
        _set_spans(path, data, len(events), rows)
        del data
        return _rank_trace(path, rank, doc, len(events), rows, runtime_cats, first_pid)


def _rank_trace(path: Path, rank: int | None, doc: Trace, n_events: int, rows: dict[str, _Rows],
                runtime_cats: list[str], first_pid: Any) -> RankTrace:
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

    gpu = _gpu_table(rows["gpu"], names)
    runtime = _runtime_table(rows["runtime"], names)
    host_ops = _host_table(rows["host"], names)
    syncs = _sync_table(rows["sync"], names)

    if gpu.empty:
        notes.append("no GPU activity in this trace (was CUDA profiling on?)")
    devices = {d.id: d.name for d in (doc.deviceProperties or [])}
    meta = {
        "base_time_ns": doc.baseTimeNanoseconds,
        "schema_version": doc.schemaVersion,
        "backend": dist.backend if dist else None,
        "nccl_version": dist.nccl_version if dist else None,
        "n_events": n_events,
        # HTA rounds events to whole µs only when the trace's timestamps are fractional.
        "fractional_us_timestamps": bool(
            any((tab["start_ns"].to_numpy() % 1000).any() for tab in (gpu, runtime, host_ops))),
        # which runtimes the calls came from: syncs are judged on CUDA / HIP ones only
        "runtime_categories": sorted({str(c).lower() for c in runtime_cats}),
        # HTA 0.5.0 takes GPU-side ProfilerStep annotations for CPU events when it cuts the last step
        # (iterations.like_hta_mask): the latest one's start, if any
        "gpu_step_annotation_last_start_ns": _last_gpu_step_start(rows["gpu_annotation"]),
        META_KEY: {str(d.id): lim for d in (doc.deviceProperties or []) if (lim := device_limits(
            d.numSms, d.regsPerMultiprocessor, d.sharedMemPerMultiprocessor, d.maxThreadsPerMultiprocessor))},
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


def _last_gpu_step_start(rows: _Rows) -> int | None:
    """Start of the latest GPU-side ProfilerStep annotation (None without any)."""
    if not len(rows):
        return None
    steps = np.asarray(["ProfilerStep" in n for n in rows.name_uniques], dtype=bool)[rows.name_codes]
    return int(rows.start[steps].max()) if steps.any() else None


def _select_rows(listed: list[Any], events: np.ndarray, known: bool) -> tuple[dict[str, _Rows], list[str]]:
    """Per table, its complete ("X") events; the category decides the table, case-insensitively;
    table order is category order, then file order (what the stable sort by start keeps for ties).
    Also the distinct categories of the runtime table's events. known: decoded as KnownCategoryEvent."""
    out = {t: _Rows() for t in TABLES}
    if not len(events):
        return out, []
    complete, cat_codes, cats = complete_categories(listed, known)
    lowered = [c.lower() for c in cats]
    order = np.array([CATEGORY_ORDER.get(c, -1) for c in lowered], dtype=np.int64)
    table = np.array([TABLES.index(t) if (t := TABLE_OF_CATEGORY.get(c, ("", ""))[0]) else -1 for c in lowered],
                     dtype=np.int64)
    kinds = [TABLE_OF_CATEGORY.get(c, ("", ""))[1] for c in lowered]
    table_of = table[cat_codes]
    runtime_cats: list[str] = []
    for t, name in enumerate(TABLES):
        sel = np.flatnonzero(table_of == t)
        if not len(sel):
            continue
        sel = sel[np.argsort(order[cat_codes[sel]], kind="stable")]
        idx = complete[sel]
        picked = events[idx]
        out[name] = _Rows(idx, picked, picked.tolist(), cat_codes[sel], kinds)
        if name == "runtime":
            runtime_cats = [cats[c] for c in np.unique(cat_codes[sel])]
    return out, runtime_cats


def _set_spans(path: Path, data: TraceBytes, n_events: int, rows: dict[str, _Rows]) -> None:
    """Each table's start and end in ns (and its names), once every used event's time is checked."""
    used = [r for r in rows.values() if len(r)]
    # whole µs as written (what PyTorch writes) are exact as they are: no type scan, no second read
    whole_ts = [whole_us(r.listed, GET["ts"]) for r in used]
    all_whole = all(ts is not None for ts in whole_ts)
    ts_us = [ts.astype(np.float64) for ts in whole_ts] if all_whole else [floats(r.listed, GET["ts"]) for r in used]
    dur_us = [floats(r.listed, GET["dur"]) for r in used]
    for r in used:
        r.name_codes, r.name_uniques = str_codes(r.listed, GET["name"])

    def name_of(i: int) -> str:  # the i-th used event's, for the message naming it
        for r in used:
            if i < len(r):
                return r.name_uniques[r.name_codes[i]]
            i -= len(r)
        raise IndexError(i)

    check_us_times(np.concatenate(ts_us or [np.zeros(0)]), np.concatenate(dur_us or [np.zeros(0)]),
                   name_of=name_of)
    starts = [ts * 1000 for ts in whole_ts] if all_whole else _double_starts(path, data, n_events, used, ts_us)
    for r, start, dur in zip(used, starts, dur_us, strict=True):
        r.start = start
        r.end = r.start + np.maximum(ns_from_us(dur), 0)
        r.sort_by_start()


def _double_starts(path: Path, data: TraceBytes, n_events: int, used: list[_Rows],
                   ts_us: list[np.ndarray]) -> list[np.ndarray]:
    """Start times in ns from µs doubles; epoch-scale µs with a fraction, which a double no longer
    holds to the ns, are read again from their digits (_exact_starts)."""
    exact = (any(np.abs(ts).max() >= EXACT_LIMIT_US for ts in ts_us)
             and any(float in set(map(type, pluck(r.listed, GET["ts"]))) for r in used))
    if not exact:
        return [ns_from_us(ts) for ts in ts_us]
    start_all = _exact_starts(path, data, n_events)
    return [start_all[r.idx] for r in used]


def _exact_starts(path: Path, data: TraceBytes, n: int) -> np.ndarray:
    """Start times in ns read from the decimal digits themselves (epoch-scale timestamps)."""
    try:
        exact = EXACT_DECODER.decode(data).traceEvents or []
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise BadInputError(path, f"timestamps cannot be read ({exc})") from None
    values = np.fromiter(map(GET["ts"], exact), dtype=object, count=n)
    bad = [v for v in pd.unique(values) if not isinstance(v, (int, decimal.Decimal))]
    if bad:
        raise BadInputError(path, f"not a Kineto trace: non-numeric ts {bad[0]!r}")
    return exact_ns(values)


def _gpu_table(rows: _Rows, names: NameTable) -> pd.DataFrame:
    if len(rows) == 0:
        return make_gpu_table(0)
    # most args are wanted here: one visit per event's args (kineto_schema.transpose)
    args = transpose(map(GET["args"], rows.listed), ARG_FIELDS)
    device = to_ints(args["device"], -1)
    if len(missing := np.flatnonzero(device < 0)):  # old traces: the process id stands for the device
        device[missing] = np.maximum(ints(rows.events[missing].tolist(), GET["pid"], -1), 0)
    stream = to_ints(args["stream"], -1)
    if len(missing := np.flatnonzero(stream < 0)):
        stream[missing] = ints(rows.events[missing].tolist(), GET["tid"], -1)
    kind_index = np.array([GPU_KINDS.index(k) if k in GPU_KINDS else -1 for k in rows.kinds], dtype=np.int8)
    return make_gpu_table(
        len(rows),
        start_ns=rows.start,
        end_ns=rows.end,
        device=device,
        stream=stream,
        name_id=intern(names, rows.name_codes, rows.name_uniques),
        kind=pd.Categorical.from_codes(kind_index[rows.kind_codes], categories=GPU_KINDS),
        category=pd.Categorical.from_codes(np.full(len(rows), CATEGORIES.index("other"), dtype=np.int8),
                                           categories=CATEGORIES),
        correlation=to_ints(args["correlation"], -1),
        bytes=to_ints(args["bytes"], -1),
        src_device=to_ints(args["src_device"], -1),
        dst_device=to_ints(args["dst_device"], -1),
        seq=to_ints(args["seq"], -1),
        msg_nelems=to_ints(args["in_nelems"], -1),
        out_nelems=to_ints(args["out_nelems"], -1),
        group_size=to_ints(args["group_size"], -1),
        blocks=dims_product(args["grid"]),
        threads=np.minimum(dims_product(args["block"]), 2**31 - 1),
        regs=np.clip(to_ints(args["regs"], -1), -1, 2**31 - 1),
        smem=np.clip(to_ints(args["smem"], -1), -1, 2**31 - 1),
        coll_name=_collective_column(column(rows.name_uniques), rows.name_codes, strings(args["collective_name"])),
        pg=strings(args["pg_name"]),
        dtype=strings(args["dtype"]),
    )


def _collective_column(kernel_names: np.ndarray, codes: np.ndarray, from_args: np.ndarray) -> np.ndarray:
    """One collective naming for both formats: the kernel name decides (as it does for nsys);
    the profiler's "Collective name" arg ("allreduce", "_allgather_base") fills in otherwise.
    kernel_names are the distinct names, codes say which one each row has."""
    out = collective_names(kernel_names)[codes]
    fill = np.flatnonzero((out == "") & (from_args != ""))
    for i in fill:  # only kernels the name did not identify (few)
        arg = str(from_args[i])
        key = arg.lower().strip("_").replace("_", "").removesuffix("base").removesuffix("tensor")
        out[i] = COLLECTIVES.get(key, arg)
    return out


def _runtime_table(rows: _Rows, names: NameTable) -> pd.DataFrame:
    return make_table(
        RUNTIME_COLUMNS, len(rows),
        start_ns=rows.start, end_ns=rows.end,
        name_id=intern(names, rows.name_codes, rows.name_uniques),
        pid=ints(rows.listed, GET["pid"], -1), tid=ints(rows.listed, GET["tid"], -1),
        correlation=ints(rows.listed, GET_ARG["correlation"], -1),
    )


def _host_table(rows: _Rows, names: NameTable) -> pd.DataFrame:
    return make_table(
        HOST_OP_COLUMNS, len(rows),
        start_ns=rows.start, end_ns=rows.end,
        name_id=intern(names, rows.name_codes, rows.name_uniques),
        pid=ints(rows.listed, GET["pid"], -1), tid=ints(rows.listed, GET["tid"], -1),
        correlation=ints(rows.listed, GET_ARG["external_id"], -1),
        kind=rows.kind_column(),
    )


def _sync_table(rows: _Rows, names: NameTable) -> pd.DataFrame:
    return make_table(
        SYNC_COLUMNS, len(rows),
        start_ns=rows.start, end_ns=rows.end,
        device=np.maximum(ints(rows.listed, GET_ARG["device"], 0), 0),
        stream=ints(rows.listed, GET_ARG["stream"], -1),
        name_id=intern(names, rows.name_codes, rows.name_uniques),
        correlation=ints(rows.listed, GET_ARG["correlation"], -1),
    )
