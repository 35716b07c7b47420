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
import os
import re
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd

from analyzers.errors import BadInputError
from analyzers.io.input_limits import InputLimitError, check_file_size, check_us_times, gunzip_into, json_problem
from analyzers.io.kineto_schema import (
    CATEGORY_ORDER,
    DECODER,
    EXACT_DECODER,
    EXACT_LIMIT_US,
    GET,
    GET_ARG,
    TABLE_OF_CATEGORY,
    Trace,
    column,
    exact_ns,
    factorize,
    floats,
    intern,
    ints,
    ns_from_us,
    strings,
)
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
# Bumped whenever the tables this loader produces change (the parse cache keys on it).
LOADER_VERSION = 4  # 4: input limits (bounded gzip, refused times), out-of-range int args


def read_bytes(path: Path) -> bytes | bytearray:
    """File contents, gunzipped (streaming, by magic, not by name) when gzip."""
    try:
        with path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if fh.read(2) != b"\x1f\x8b":
                check_file_size(size)
                fh.seek(0)
                return fh.read()
            fh.seek(0)
            return gunzip_into(fh, size)  # bounded: a gzip bomb is refused, not unpacked
    except OSError as exc:
        raise BadInputError(path, f"cannot read file ({exc.strerror or exc})") from None
    except InputLimitError as exc:
        raise BadInputError(path, exc.problem) from None


def rank_from_filename(path: Path) -> int | None:
    m = RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


def _decode(path: Path, data: bytes | bytearray) -> Trace:
    try:
        return DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise BadInputError(path, f"not a Kineto trace (unexpected structure: {exc})") from None
    except msgspec.DecodeError as exc:
        raise BadInputError(path, json_problem(data, str(exc))) from None


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
    ts_used = column(events[used], GET["ts"])  # ints and floats, as written
    ts_us = np.zeros(n_events, dtype=np.float64)
    ts_us[used] = ts_used.astype(np.float64)
    check_us_times(ts_us[used], floats(events[used], GET["dur"]), name_of=lambda i: events[used[i]].name)
    if (len(used) and np.abs(ts_us[used]).max() >= EXACT_LIMIT_US
            and float in set(map(type, ts_used))):
        start_all = _exact_starts(path, data, n_events)
    else:
        start_all = ns_from_us(ts_us)
    del data, ts_us, ts_used

    def span(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        start = start_all[idx]
        return start, start + np.maximum(ns_from_us(floats(events[idx], GET["dur"])), 0)

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
        # which runtimes the calls came from: syncs are judged on CUDA / HIP ones only
        "runtime_categories": sorted({str(c).lower() for c in factorize(
            column(events[rows["runtime"][0]], GET["cat"]))[1]}) if len(rows["runtime"][0]) else [],
        # HTA 0.5.0 takes GPU-side ProfilerStep annotations for CPU events when it cuts the last step
        # (iterations.like_hta_mask): the latest one's start, if any
        "gpu_step_annotation_last_start_ns": _last_gpu_step_start(events, rows["gpu_annotation"][0], span),
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


def _last_gpu_step_start(events: np.ndarray, idx: np.ndarray, span) -> int | None:
    """Start of the latest GPU-side ProfilerStep annotation (None without any)."""
    if not len(idx):
        return None
    steps = idx[np.asarray(["ProfilerStep" in n for n in strings(events[idx], GET["name"])], dtype=bool)]
    return int(span(steps)[0].max()) if len(steps) else None


def _select_rows(events: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per table: (event indices in table order, kind per row). Complete ("X") events only;
    the category decides the table, case-insensitively; table order is category order, then
    file order (what the stable sort by start keeps for ties)."""
    empty = np.zeros(0, dtype=np.int64)
    out = {t: (empty, np.zeros(0, dtype=object)) for t in ("gpu", "runtime", "host", "sync", "gpu_annotation")}
    if not len(events):
        return out
    cat_codes, cats = factorize(column(events, GET["cat"]))
    ph_codes, phs = factorize(column(events, GET["ph"]))
    complete = np.asarray([p == "X" for p in phs], dtype=bool)[ph_codes]
    lowered = [str(c).lower() for c in cats]
    for table in out:
        members = [i for i, c in enumerate(lowered) if TABLE_OF_CATEGORY.get(c, ("", ""))[0] == table]
        if not members:
            continue
        order = np.full(len(cats), -1, dtype=np.int64)
        kinds = np.full(len(cats), "", dtype=object)
        for i in members:
            order[i] = CATEGORY_ORDER[lowered[i]]
            kinds[i] = TABLE_OF_CATEGORY[lowered[i]][1]
        rank_of = order[cat_codes]
        idx = np.flatnonzero((rank_of >= 0) & complete)
        idx = idx[np.argsort(rank_of[idx], kind="stable")]
        out[table] = (idx, kinds[cat_codes[idx]])
    return out


def _exact_starts(path: Path, data: bytes | bytearray, n: int) -> np.ndarray:
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


def _sorted_by_start(table: pd.DataFrame) -> pd.DataFrame:
    return table.sort_values("start_ns", kind="stable").reset_index(drop=True)


def _gpu_table(events: np.ndarray, sel: tuple[np.ndarray, np.ndarray], span, names: NameTable):
    idx, kind = sel
    if len(idx) == 0:
        return make_gpu_table(0)
    rows = events[idx]
    start, end = span(idx)
    device = ints(rows, GET_ARG["device"], -1)
    device = np.where(device >= 0, device, np.maximum(ints(rows, GET["pid"], -1), 0))
    stream = ints(rows, GET_ARG["stream"], -1)
    stream = np.where(stream >= 0, stream, ints(rows, GET["tid"], -1))
    kernel_names = column(rows, GET["name"])
    table = make_gpu_table(
        len(idx),
        start_ns=start,
        end_ns=end,
        device=device,
        stream=stream,
        name_id=intern(names, kernel_names),
        kind=kind,
        correlation=ints(rows, GET_ARG["correlation"], -1),
        bytes=ints(rows, GET_ARG["bytes"], -1),
        src_device=ints(rows, GET_ARG["src_device"], -1),
        dst_device=ints(rows, GET_ARG["dst_device"], -1),
        seq=ints(rows, GET_ARG["seq"], -1),
        msg_nelems=ints(rows, GET_ARG["in_nelems"], -1),
        coll_name=_collective_column(kernel_names, strings(rows, GET_ARG["collective_name"])),
        pg=strings(rows, GET_ARG["pg_name"]),
        dtype=strings(rows, GET_ARG["dtype"]),
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
        name_id=intern(names, column(rows, GET["name"])),
        pid=ints(rows, GET["pid"], -1), tid=ints(rows, GET["tid"], -1),
        correlation=ints(rows, GET_ARG["correlation"], -1),
    ))


def _host_table(events: np.ndarray, sel: tuple[np.ndarray, np.ndarray], span, names: NameTable):
    idx, kind = sel
    rows = events[idx]
    start, end = span(idx)
    return _sorted_by_start(make_table(
        HOST_OP_COLUMNS, len(idx),
        start_ns=start, end_ns=end,
        name_id=intern(names, column(rows, GET["name"])),
        pid=ints(rows, GET["pid"], -1), tid=ints(rows, GET["tid"], -1),
        correlation=ints(rows, GET_ARG["external_id"], -1),
        kind=kind,
    ))


def _sync_table(events: np.ndarray, sel: tuple[np.ndarray, np.ndarray], span, names: NameTable):
    idx, _ = sel
    rows = events[idx]
    start, end = span(idx)
    return _sorted_by_start(make_table(
        SYNC_COLUMNS, len(idx),
        start_ns=start, end_ns=end,
        device=np.maximum(ints(rows, GET_ARG["device"], 0), 0),
        stream=ints(rows, GET_ARG["stream"], -1),
        name_id=intern(names, column(rows, GET["name"])),
        correlation=ints(rows, GET_ARG["correlation"], -1),
    ))
