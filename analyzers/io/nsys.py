"""Nsight Systems reader: ``nsys export --type sqlite`` files, and ``.nsys-rep`` reports through nsys.

Why it is built this way:

- One export may hold every rank of ``nsys profile torchrun ...``, and CUPTI correlation ids
  restart in each process, so every table is split by process (pid = (globalPid >> 24) &
  0xFFFFFF) before anything is joined: runtime <-> kernel joins never cross processes.
- The schema changes between nsys versions (2022.4 ... 2026.x) and exports are lazy (a table
  exists only when it has rows), so tables and columns are introspected with sqlite-utils and
  a missing optional table becomes a note on the trace, not an error.
- The user's file is evidence: it is opened read-only and immutable, and .nsys-rep exports go
  to the user cache dir, never beside the input.
- Names follow Kineto's spelling ("Memcpy HtoD (Pageable -> Device)", "cudaStreamSynchronize",
  "Stream Sync") so one set of classification rules and analyses serves both formats.

Every table is read once with one SQL query and processed with vectorized numpy/pandas.

This module builds one RankTrace per process; nsys_rep, nsys_schema, nsys_tables and nsys_ranks
hold the steps before.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from analyzers.errors import BadInputError
from analyzers.io.nsys_nccl import attach_payloads, read_nccl_calls
from analyzers.io.nsys_ranks import (
    _assign_ranks,
    _devices,
    _export_meta,
    _hostname,
    _process_names,
    sm_limits,
)
from analyzers.io.nsys_rep import _source_label, export_notes, is_nsys_rep, nsys_rep_to_sqlite
from analyzers.io.nsys_schema import (
    OPTIONAL_TABLES,
    T_KERNEL,
    T_MEMCPY,
    T_MEMSET,
    T_NVTX,
    T_RUNTIME,
    T_SYNC,
    _Export,
    _pid_expr,
)
from analyzers.io.nsys_tables import (
    RESOURCE_COLUMNS,
    _by_pid,
    _read_kernels,
    _read_memcpy,
    _read_memset,
    _read_nvtx,
    _read_runtime,
    _read_syncs,
    distinct_strings,
    null_time_rows,
)
from analyzers.timeline.collectives import collective_names
from analyzers.timeline.model import (
    HOST_OP_COLUMNS,
    RUNTIME_COLUMNS,
    SYNC_COLUMNS,
    NameTable,
    RankTrace,
    make_gpu_table,
    make_table,
)
from analyzers.timeline.sm_resources import META_KEY

RUNTIME_VERSION_SUFFIX = re.compile(r"_v\d+$")  # "cudaStreamSynchronize_v3020" -> Kineto's name
# --------------------------------------------------------------------------------------------
# Building one RankTrace per process
# --------------------------------------------------------------------------------------------

def _intern(names: NameTable, values: np.ndarray, transform=None) -> np.ndarray:
    """Name ids for a string column; `transform` runs once per distinct string."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.int32)
    codes, uniques = distinct_strings(values)
    mapping = np.array([names.intern(transform(str(u)) if transform else str(u)) for u in uniques],
                       dtype=np.int32)
    return mapping[codes]


def _strip_version(name: str) -> str:
    return RUNTIME_VERSION_SUFFIX.sub("", name)


def _gpu_table(parts: list[pd.DataFrame], names: NameTable) -> pd.DataFrame:
    parts = [p for p in parts if p is not None and len(p)]
    if not parts:
        return make_gpu_table(0)
    df = pd.concat(parts, ignore_index=True, sort=False)
    for col in ("bytes", "src_device", "dst_device", *RESOURCE_COLUMNS):
        df[col] = df[col].fillna(-1).astype(np.int64) if col in df else -1
    df = df.sort_values("start_ns", kind="stable").reset_index(drop=True)
    name_ids = _intern(names, df["name"].to_numpy(dtype=object))
    is_kernel = (df["kind"] == "kernel").to_numpy()
    coll = np.full(len(df), "", dtype=object)
    coll[is_kernel] = collective_names(df["name"].to_numpy(dtype=object)[is_kernel])
    return make_gpu_table(
        len(df),
        start_ns=df["start_ns"], end_ns=df["end_ns"], device=df["device"], stream=df["stream"],
        name_id=name_ids, kind=df["kind"].to_numpy(dtype=object), correlation=df["correlation"],
        bytes=df["bytes"], src_device=df["src_device"], dst_device=df["dst_device"], coll_name=coll,
        blocks=df["blocks"], **{c: np.clip(df[c].to_numpy(), -1, 2**31 - 1) for c in ("threads", "regs", "smem")},
    )


def nested_duplicate_calls(df: pd.DataFrame) -> np.ndarray:
    """Rows that repeat an earlier call: same thread, same correlation id, overlapping it in time.

    Some exports (seen with nsys 2022.2 on an MPI+CUDA run) record every runtime call twice,
    e.g. ``cudaMemcpy`` with ``cudaMemcpy_v3020`` inside it; counted twice, each sync would be
    charged twice. One thread cannot make two calls at once except by nesting, and nested calls
    get their own correlation ids, so such a pair is one call: the outermost row is kept.
    """
    if df.empty:
        return np.zeros(0, dtype=bool)
    d = pd.DataFrame({"tid": df["tid"].to_numpy(), "corr": df["correlation"].to_numpy(),
                      "s": df["start_ns"].to_numpy(), "e": df["end_ns"].to_numpy(), "i": np.arange(len(df))})
    d = d[d["corr"] >= 0].sort_values(["tid", "corr", "s", "e"], ascending=[True, True, True, False],
                                     kind="stable")
    first_s = d.groupby(["tid", "corr"])["s"].transform("first")
    first_e = d.groupby(["tid", "corr"])["e"].transform("first")  # the outermost (earliest, longest)
    repeat = d.duplicated(["tid", "corr"], keep="first") & (d["s"] >= first_s) & (d["s"] < first_e)
    out = np.zeros(len(df), dtype=bool)
    out[d.loc[repeat, "i"].to_numpy()] = True
    return out


def _runtime_table(df: pd.DataFrame | None, names: NameTable, notes: list[str] | None = None) -> pd.DataFrame:
    if df is None or df.empty:
        return make_table(RUNTIME_COLUMNS, 0)
    dup = nested_duplicate_calls(df)
    if dup.any():
        df = df[~dup]
        if notes is not None:
            notes.append(f"{int(dup.sum())} CUDA API calls were recorded twice (same thread and correlation id, "
                         "one inside the other, e.g. cudaMemcpy_v3020 inside cudaMemcpy): the inner copies "
                         "were dropped")
    df = df.sort_values("start_ns", kind="stable")
    return make_table(
        RUNTIME_COLUMNS, len(df),
        start_ns=df["start_ns"], end_ns=df["end_ns"],
        name_id=_intern(names, df["name"].to_numpy(dtype=object), _strip_version),
        pid=df["pid"], tid=df["tid"], correlation=df["correlation"],
    ).reset_index(drop=True)


def _host_table(df: pd.DataFrame | None, names: NameTable) -> pd.DataFrame:
    if df is None or df.empty:
        return make_table(HOST_OP_COLUMNS, 0, kind=np.zeros(0, dtype=object))
    df = df.sort_values("start_ns", kind="stable")
    return make_table(
        HOST_OP_COLUMNS, len(df),
        start_ns=df["start_ns"], end_ns=df["end_ns"],
        name_id=_intern(names, df["name"].to_numpy(dtype=object)),
        pid=df["pid"], tid=df["tid"],
        kind=np.full(len(df), "nvtx", dtype=object),
    ).reset_index(drop=True)


def _sync_table(df: pd.DataFrame | None, names: NameTable) -> pd.DataFrame:
    if df is None or df.empty:
        return make_table(SYNC_COLUMNS, 0)
    df = df.sort_values("start_ns", kind="stable")
    return make_table(
        SYNC_COLUMNS, len(df),
        start_ns=df["start_ns"], end_ns=df["end_ns"], device=df["device"], stream=df["stream"],
        name_id=_intern(names, df["name"].to_numpy(dtype=object)), correlation=df["correlation"],
    ).reset_index(drop=True)


def _owner_of_unattributed(frames: list[pd.DataFrame], runtime: pd.DataFrame | None,
                           known: set[int]) -> int | None:
    """The one process that can own rows without a process id: the only CUDA process, or the only
    one whose API calls carry all their correlation ids (ids collide across processes, so one
    match proves nothing; a launcher's few calls never cover them all)."""
    if len(known) == 1:
        return next(iter(known))
    if runtime is None or runtime.empty:
        return None
    corr = np.concatenate([df.loc[df["pid"] < 0, "correlation"].to_numpy() for df in frames])
    corr = corr[corr >= 0]
    owners = [p for p in sorted(known)
              if corr.size and np.isin(corr, runtime.loc[runtime["pid"] == p, "correlation"].to_numpy()).all()]
    return owners[0] if len(owners) == 1 else None


def _rank_processes(gpu_all: pd.DataFrame | None, known: set[int], proc_names: dict[int, str],
                    notes: list[str]) -> list[int]:
    """The processes that are ranks: those that ran GPU work.

    A launcher (torchrun, mpirun, a pytest parent) often makes a few CUDA API calls (cuInit,
    cuModuleGetLoadingMode) without running anything on a GPU; counting it would shift every
    rank by one. Only when no process ran GPU work are the API-only processes returned.
    """
    gpu_pids = set() if gpu_all is None else {int(x) for x in gpu_all["pid"].unique() if x >= 0}
    if not gpu_pids:
        return sorted(known)
    idle = sorted(known - gpu_pids)
    if idle:
        listed = ", ".join(f"{p} ({proc_names.get(p) or 'unnamed'})" for p in idle)
        notes.append(f"not ranks (CUDA API calls but no GPU work): process {listed}")
    return sorted(gpu_pids)


def load_nsys(path: str | Path) -> list[RankTrace]:
    """One RankTrace per rank process, ordered by rank.

    A rank is a process that ran GPU work; processes with CUDA API calls only (the torchrun or
    mpirun launcher) are named in the notes instead, unless no process ran GPU work at all.

    Accepts an SQLite export or a .nsys-rep report (exported to the cache with the user's nsys).
    """
    path = Path(path)
    source = str(path)
    sqlite_path = path
    if is_nsys_rep(path):
        sqlite_path = nsys_rep_to_sqlite(path)
    else:
        source = _source_label(path) or source
    ex = _Export.open(sqlite_path, source)
    try:
        return _load(ex, source, sqlite_path)
    finally:
        ex.close()


def _load(ex: _Export, source: str, sqlite_path: Path) -> list[RankTrace]:
    notes = [msg for table, msg in OPTIONAL_TABLES.items() if not ex.has(table)] + export_notes(sqlite_path)

    gpu_parts: list[pd.DataFrame] = []
    no_pid_column = False
    for table, reader in ((T_KERNEL, _read_kernels), (T_MEMCPY, _read_memcpy), (T_MEMSET, _read_memset)):
        if not ex.has(table):
            continue
        pid = _pid_expr(ex, table)
        if pid is None:
            notes.append(f"{table} has no globalPid column: its rows are given to the process whose "
                         "API calls launched them")
            pid, no_pid_column = "-1", True
        gpu_parts.append(reader(ex, pid))
        if unnamed := gpu_parts[-1].attrs.get("unnamed", 0):
            notes.append(f"{unnamed} kernels have a name id the export's StringIds table does not hold: named "
                         "'<kernel name missing from the export ...>' and counted as 'other', neither "
                         "communication nor compute (what they did is unknown)")
    runtime = _read_runtime(ex) if ex.has(T_RUNTIME) else None
    syncs = None
    if ex.has(T_SYNC):
        sync_pid = _pid_expr(ex, T_SYNC)
        syncs = _read_syncs(ex, sync_pid or "-1")
    nvtx = _read_nvtx(ex) if ex.has(T_NVTX) else None
    for table in (T_KERNEL, T_MEMCPY, T_MEMSET, T_RUNTIME, T_SYNC):
        if ex.has(table) and (n := null_time_rows(ex, table)):
            notes.append(f"{n} rows of {table} have no start or no end time: left out")
    for what, df in (("CUDA API calls", runtime), ("NVTX ranges", nvtx)):
        if df is not None and len(df) and (lost := int(df["pid"].isna().sum())):
            notes.append(f"{lost} {what} have no thread id (globalTid NULL): left out, no process owns them")
    no_pid = {}
    for what, df in (("GPU activities", gpu_parts), ("synchronization records", [syncs])):
        for part in df:
            if part is not None and len(part) and part["pid"].isna().any():
                no_pid[what] = no_pid.get(what, 0) + int(part["pid"].isna().sum())
                part["pid"] = part["pid"].fillna(-1).astype(np.int64)

    gpu_all = pd.concat([p for p in gpu_parts if len(p)], ignore_index=True) if any(
        len(p) for p in gpu_parts) else None
    known: set[int] = set()
    for df in (gpu_all, runtime):
        if df is not None and len(df):
            known |= {int(x) for x in df["pid"].unique() if x >= 0}
    unattributed = [df for df in (gpu_all, syncs) if df is not None and (df["pid"] < 0).any()]
    if unattributed:
        owner = _owner_of_unattributed(unattributed, runtime, known)
        if owner is None and no_pid_column:
            raise BadInputError(source, "GPU activity has no process ids (no globalPid column) and the "
                                        "export holds several CUDA processes: cannot tell them apart")
        for df in unattributed:
            df.loc[df["pid"] < 0, "pid"] = owner if owner is not None else np.nan  # NaN: no process's rows
        for what, n in no_pid.items():
            notes.append(f"{n} {what} have no process id (globalPid NULL): " + (
                f"given to process {owner}, the one whose API calls launched them" if owner is not None else
                "left out: the export holds several CUDA processes and their launches do not tell which ran them"))
    if not known:
        raise BadInputError(source, "no CUDA activity in this export (no kernels, copies or CUDA API "
                                    "calls): profile with `nsys profile --trace=cuda,nvtx`")
    proc_names = _process_names(ex)
    pids = _rank_processes(gpu_all, known, proc_names, notes)

    nccl_nvtx = nvtx is not None and any(str(n).startswith("nccl")
                                         for n in distinct_strings(nvtx["name"].to_numpy())[1])
    gpu_by, rt_by, sync_by, nvtx_by = _by_pid(gpu_all), _by_pid(runtime), _by_pid(syncs), _by_pid(nvtx)
    del gpu_parts, gpu_all, runtime, syncs, nvtx  # the per-process copies are all that is needed now
    nccl = read_nccl_calls(ex) if nccl_nvtx else None
    if nccl_nvtx and (nccl is None or not nccl.n_payload):
        notes.append("NCCL NVTX ranges carry no payload in this export (`nsys export --include-json true` "
                     "keeps them): communicators and message sizes unknown")
    if nccl is not None and nccl.n_bad:
        notes.append(f"{nccl.n_bad} NCCL NVTX payloads could not be read (malformed JSON or binary data, or "
                     "fields of the wrong type): those calls' sizes are unknown")
    ranks = _assign_ranks(ex, pids, nccl.calls if nccl is not None else None)
    meta_file = _export_meta(ex)
    hostname = _hostname(ex)
    devices = _devices(ex)
    limits = sm_limits(ex)
    if not devices:
        notes.append("GPU names unknown (no TARGET_INFO_GPU table)")

    traces = []
    for p in pids:
        names = NameTable()
        gpu = _gpu_table([gpu_by.pop(p, None)], names)
        trace_notes = list(notes)
        rt = rt_by.pop(p, None)
        if nccl is not None and nccl.n_payload:
            kernel_names = np.asarray(names.names, dtype=object)[gpu["name_id"].to_numpy()]
            trace_notes += attach_payloads(gpu, kernel_names, rt, nccl.of(p), nccl.comm_ranks)
        if gpu.empty:
            trace_notes.append(f"process {p} made CUDA API calls but ran no GPU work in this export")
        info = ranks[p]
        used = set(gpu["device"].unique().tolist())
        traces.append(RankTrace(
            rank=info.rank,
            source=source,
            fmt="nsys",
            names=names,
            gpu=gpu,
            runtime=_runtime_table(rt, names, trace_notes),
            host_ops=_host_table(nvtx_by.pop(p, None), names),
            sync_events=_sync_table(sync_by.pop(p, None), names),
            world_size=info.world_size,
            rank_source=info.source,
            hostname=hostname,
            pid=p,
            devices=dict(devices),
            meta={**meta_file, "process_name": proc_names.get(p, ""), "sqlite": str(sqlite_path), META_KEY: limits,
                  "devices_used": sorted(int(d) for d in used), "n_processes": len(pids)},
            notes=trace_notes,
        ))
    return sorted(traces, key=lambda t: t.rank)
