"""Reading an export's activity tables (kernels, copies, memsets, runtime, syncs, NVTX), split by process."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyzers.io.nsys_schema import (
    CUPTI_INVALID_ID,
    MEM_KINDS,
    MEMCPY_KINDS,
    NVTX_RANGE_TYPES,
    PID_SQL,
    PTOP,
    SYNC_NAMES,
    SYNC_NAMES_BY_SUFFIX,
    T_KERNEL,
    T_MEMCPY,
    T_MEMSET,
    T_NVTX,
    T_RUNTIME,
    T_SYNC,
    TID_SQL,
    UNKNOWN_SYNC,
    _Export,
    _opt,
    quote,
)

# --------------------------------------------------------------------------------------------
# Reading the tables (whole file), then splitting by process
# --------------------------------------------------------------------------------------------

def _activity_sql(ex: _Export, table: str, extra: list[str], pid: str) -> str:
    cols = [
        'start AS start_ns', '"end" AS end_ns',
        f'{_opt(ex, table, "deviceId")} AS device',
        f'{_opt(ex, table, "streamId")} AS stream',
        f'{_opt(ex, table, "correlationId")} AS correlation',
        f"{pid} AS pid",
        *extra,
    ]
    return f'SELECT {", ".join(cols)} FROM {quote(table)} WHERE start IS NOT NULL AND "end" IS NOT NULL'


def names_column(values: np.ndarray, index: pd.Index) -> pd.Series:
    """A name column that holds the readers' Python strings themselves (object dtype). Left to infer,
    pandas copies every row's string into an Arrow array, and again at each sort and split: one 1 MB
    name that 1,200 rows share by StringIds id became 3.5 GB. As objects, the rows share the one string
    StringIds gave, and interning (nsys._intern) hashes it once."""
    return pd.Series(np.asarray(values, dtype=object), index=index, dtype=object)


def distinct_strings(values: np.ndarray) -> tuple[np.ndarray, list[object]]:
    """(codes, uniques) of a column of Python strings (pd.factorize's answer), by object identity first:
    rows that share one string object (a StringIds name) cost one look-up, not a hash of the whole
    string each (pandas' string hash table rehashed a 1 MB name on every one of 1,200 rows: 8 s). Equal
    strings held by distinct objects are then merged through a dict (Python caches each str's hash)."""
    values = np.asarray(values, dtype=object)
    if not values.size:
        return np.zeros(0, dtype=np.int64), []
    by_id, first = pd.factorize(np.fromiter(map(id, values), dtype=np.int64, count=values.size))
    objects = values[np.unique(by_id, return_index=True)[1]]
    index: dict[object, int] = {}
    to_unique = np.array([index.setdefault(o, len(index)) for o in objects], dtype=np.int64)
    return to_unique[by_id], list(index)


def _read_kernels(ex: _Export, pid: str) -> pd.DataFrame:
    name_cols = [c for c in ("demangledName", "shortName", "mangledName") if c in ex.columns(T_KERNEL)]
    if not name_cols:
        name_cols_sql = ["'' AS demangledName"]
        name_cols = ["demangledName"]
    else:
        name_cols_sql = [f'"{c}"' for c in name_cols]
    df = ex.query(_activity_sql(ex, T_KERNEL, name_cols_sql + _resource_sql(ex), pid))
    # Prefer the demangled name (what Kineto shows), then the short, then the mangled one.
    name = np.full(len(df), "", dtype=object)
    missing = np.zeros(len(df), dtype=bool)
    first_missing = np.full(len(df), -1, dtype=np.int64)
    for c in reversed(name_cols):
        text = ex.text_column(df[c])
        name = np.where(text != "", text, name)
        if pd.api.types.is_numeric_dtype(df[c].dtype):  # StringIds ids: one the table lacks names nothing
            gone = ex.missing_strings(df[c].to_numpy(dtype=np.float64))
            missing |= gone
            first_missing = np.where(gone, df[c].fillna(-1).to_numpy(dtype=np.int64), first_missing)
    unnamed = missing & (name == "")
    if unnamed.any():
        ids = first_missing[unnamed]
        uniq, inverse = np.unique(ids, return_inverse=True)
        labels = np.array([f"{MISSING_NAME} (StringIds id {int(i)})>" for i in uniq], dtype=object)
        name[unnamed] = labels[inverse.ravel()]
    out = df[["start_ns", "end_ns", "device", "stream", "correlation", "pid", *RESOURCE_COLUMNS]].copy()
    out["name"] = names_column(name, out.index)
    out["kind"] = "kernel"
    out.attrs["unnamed"] = int(unnamed.sum())
    return out


# How a kernel whose name id StringIds lacks is named; default_rules.toml classifies such names as
# "other" (it may be communication or compute: it is counted as neither, with a note).
MISSING_NAME = "<kernel name missing from the export"


RESOURCE_COLUMNS = ("blocks", "threads", "regs", "smem")


def _resource_sql(ex: _Export) -> list[str]:
    """What a kernel holds on an SM (timeline.sm_resources): products and sums of the schema's own
    columns where the export has them all, else -1."""
    have = set(ex.columns(T_KERNEL))

    def combine(cols: tuple[str, ...], op: str, alias: str) -> str:
        if not set(cols) <= have:
            return f"-1 AS {alias}"
        return f"coalesce({op.join(quote(c) for c in cols)}, -1) AS {alias}"

    return [combine(("gridX", "gridY", "gridZ"), " * ", "blocks"),
            combine(("blockX", "blockY", "blockZ"), " * ", "threads"),
            combine(("registersPerThread",), "", "regs"),
            combine(("staticSharedMemory", "dynamicSharedMemory"), " + ", "smem")]


def _memory_kind_names(ex: _Export) -> dict[int, str]:
    return ex.enum("ENUM_CUDA_MEM_KIND") or dict(MEM_KINDS)


def _copy_kind_names(ex: _Export) -> dict[int, str]:
    """Kineto's short copy kinds ("HtoD", "PtoP") from the enum names, else the known numbers."""
    names = ex.enum("ENUM_CUDA_MEMCPY_OPER", "name")
    if not names:
        return dict(MEMCPY_KINDS)
    out = {}
    for i, n in names.items():
        suffix = n.split("KIND_", 1)[-1]
        if suffix == "UNKNOWN":
            out[i] = "<unknown>"
        else:
            out[i] = re.sub(r"([A-Z])TO([A-Z])", r"\1to\2", suffix).replace("_", " ")
    return out


def _read_memcpy(ex: _Export, pid: str) -> pd.DataFrame:
    t = T_MEMCPY
    extra = [f'{_opt(ex, t, "bytes")} AS bytes', f'{_opt(ex, t, "copyKind", 0)} AS copy_kind',
             f'{_opt(ex, t, "srcKind")} AS src_kind', f'{_opt(ex, t, "dstKind")} AS dst_kind',
             f'{_opt(ex, t, "srcDeviceId")} AS src_device', f'{_opt(ex, t, "dstDeviceId")} AS dst_device']
    df = ex.query(_activity_sql(ex, t, extra, pid))
    copy_kinds, mem_kinds = _copy_kind_names(ex), _memory_kind_names(ex)
    peer = ((df["src_device"] >= 0) & (df["dst_device"] >= 0) & (df["src_device"] != df["dst_device"])).to_numpy()
    # Name each distinct (copy kind, src kind, dst kind, peer) once, as Kineto does.
    keys = np.stack([df["copy_kind"].to_numpy(np.int64), df["src_kind"].to_numpy(np.int64),
                     df["dst_kind"].to_numpy(np.int64), peer.astype(np.int64)], axis=1)
    if len(df):
        uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
        labels = np.array([
            f"Memcpy {PTOP if p else copy_kinds.get(int(k), '<unknown>')} "
            f"({mem_kinds.get(int(s), 'Unknown')} -> {mem_kinds.get(int(d), 'Unknown')})"
            for k, s, d, p in uniq], dtype=object)
        names = labels[inverse.ravel()]
    else:
        names = np.zeros(0, dtype=object)
    out = df[["start_ns", "end_ns", "device", "stream", "correlation", "pid", "bytes", "src_device",
              "dst_device"]].copy()
    out["name"] = names_column(names, out.index)
    out["kind"] = "memcpy"
    return out


def _read_memset(ex: _Export, pid: str) -> pd.DataFrame:
    t = T_MEMSET
    extra = [f'{_opt(ex, t, "bytes")} AS bytes', f'{_opt(ex, t, "memKind")} AS mem_kind']
    df = ex.query(_activity_sql(ex, t, extra, pid))
    mem_kinds = _memory_kind_names(ex)
    codes, uniques = pd.factorize(df["mem_kind"])
    labels = np.array([f"Memset ({mem_kinds.get(int(u), 'Unknown')})" for u in uniques], dtype=object)
    out = df[["start_ns", "end_ns", "device", "stream", "correlation", "pid", "bytes"]].copy()
    out["name"] = names_column(labels[codes] if len(df) else np.zeros(0, dtype=object), out.index)
    out["kind"] = "memset"
    return out


def _read_runtime(ex: _Export) -> pd.DataFrame:
    t = T_RUNTIME
    tid_col = ex.first_column(t, "globalTid", "globalPid")
    if tid_col is None:
        return pd.DataFrame()
    name_col = ex.first_column(t, "nameId", "name")
    name_sql = f'{quote(name_col)} AS name' if name_col else "'' AS name"
    df = ex.query(
        f'SELECT start AS start_ns, "end" AS end_ns, {_opt(ex, t, "correlationId")} AS correlation, '
        f'{PID_SQL.format(col=tid_col)} AS pid, '
        f'{TID_SQL.format(col=tid_col) if tid_col == "globalTid" else "0"} AS tid, {name_sql} '
        f'FROM {quote(t)} WHERE start IS NOT NULL AND "end" IS NOT NULL')
    df["name"] = names_column(ex.text_column(df["name"]), df.index)
    return df


def _read_syncs(ex: _Export, pid: str) -> pd.DataFrame:
    t = T_SYNC
    # nsys 2025.x fills deprecatedSyncType and leaves syncType 0; 2026.x the other way round.
    present = [c for c in ("syncType", "deprecatedSyncType") if c in ex.columns(t)]
    type_sql = f"coalesce({', '.join([f'nullif({chr(34)}{c}{chr(34)}, 0)' for c in present] + ['0'])})"
    df = ex.query(_activity_sql(ex, t, [f"{type_sql} AS sync_type"], pid))
    df["stream"] = np.where(df["stream"].to_numpy() == CUPTI_INVALID_ID, -1, df["stream"].to_numpy())
    names = dict(SYNC_NAMES)
    for i, n in ex.enum("ENUM_CUPTI_SYNC_TYPE", "name").items():
        names[i] = next((v for k, v in SYNC_NAMES_BY_SUFFIX.items() if n.endswith(k)), UNKNOWN_SYNC)
    codes, uniques = pd.factorize(df["sync_type"])
    labels = np.array([names.get(int(u), UNKNOWN_SYNC) for u in uniques], dtype=object)
    df["name"] = names_column(labels[codes] if len(df) else np.zeros(0, dtype=object), df.index)
    return df


def _nvtx_range_types(ex: _Export) -> list[int]:
    by_name = {v: k for k, v in ex.enum("ENUM_NSYS_EVENT_TYPE", "name").items()}
    return sorted({by_name.get(n, i) for n, i in NVTX_RANGE_TYPES.items()})


def _read_nvtx(ex: _Export) -> pd.DataFrame:
    """NVTX push/pop and start/end ranges that ended (text inline or via textId)."""
    t = T_NVTX
    if "globalTid" not in ex.columns(t):
        return pd.DataFrame()
    text_sql = '"text"' if "text" in ex.columns(t) else "NULL"
    type_filter = ""
    if "eventType" in ex.columns(t):
        type_filter = f' AND eventType IN ({", ".join(map(str, _nvtx_range_types(ex)))})'
    df = ex.query(
        f'SELECT start AS start_ns, "end" AS end_ns, {PID_SQL.format(col="globalTid")} AS pid, '
        f'{TID_SQL.format(col="globalTid")} AS tid, {text_sql} AS text, {_opt(ex, t, "textId")} AS text_id '
        f'FROM {quote(t)} WHERE start IS NOT NULL AND "end" IS NOT NULL AND "end" >= start{type_filter}')
    text = df["text"].to_numpy(dtype=object)
    from_ids = ex.strings(df["text_id"].to_numpy(dtype=np.int64))
    df["name"] = names_column(np.where(pd.isna(text), from_ids, text), df.index)
    return df.drop(columns=["text", "text_id"])


def null_time_rows(ex: _Export, table: str) -> int:
    """Rows of an activity table without a start or an end (the readers skip them: counted in a note)."""
    df = ex.query(f'SELECT count(*) AS n FROM {quote(table)} WHERE start IS NULL OR "end" IS NULL')
    return int(df["n"].iloc[0]) if len(df) else 0


def _by_pid(df: pd.DataFrame | None) -> dict[int, pd.DataFrame]:
    if df is None or df.empty:
        return {}
    return {int(p): g for p, g in df.groupby("pid", sort=True)}
