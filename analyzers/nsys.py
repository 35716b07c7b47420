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
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import sqlite_utils
from platformdirs import user_cache_dir

from .collectives import collective_names
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

SQLITE_MAGIC = b"SQLite format 3\x00"
REP_SUFFIXES = (".nsys-rep", ".qdrep")
# The first bytes of a report name the nsys that wrote it: "...Profiler Report 2024@6@2@25-...".
REP_VERSION = re.compile(rb"Profiler Report (\d{4})@(\d+)(?:@(\d+))?(?:@(\d+))?")
REP_HEADER_BYTES = 256
QUERY_CHUNK_ROWS = 100_000  # rows per fetch when reading a table (bounds peak memory)

PID_SQL = "(({col} >> 24) & 16777215)"  # globalPid / globalTid -> OS pid
TID_SQL = "({col} & 16777215)"  # globalTid -> OS tid
CUPTI_INVALID_ID = 0xFFFFFFFF  # CUPTI's "not applicable" stream / event id

T_KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
T_MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
T_MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
T_RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
T_SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
T_NVTX = "NVTX_EVENTS"
T_STRINGS = "StringIds"
T_PROCESSES = "PROCESSES"
T_CAPTURE = "META_DATA_CAPTURE"
META_EXPORT_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")
GPU_INFO_TABLES = ("TARGET_INFO_GPU", "TARGET_INFO_CUDA_DEVICE")
SYSTEM_ENV_TABLE = "TARGET_INFO_SYSTEM_ENV"

# What a table's absence costs, said once per file in RankTrace.notes.
OPTIONAL_TABLES = {
    T_KERNEL: "no kernel table: no kernels were recorded (profile with --trace=cuda)",
    T_MEMCPY: "no memcpy table: no memory copies in this export",
    T_MEMSET: "no memset table: no memsets in this export",
    T_RUNTIME: "no CUDA runtime table: host syncs, launch gaps and step windows unavailable",
    T_SYNC: "no synchronization table: GPU-side sync records unavailable",
    T_NVTX: "no NVTX_EVENTS table: NVTX ranges (iteration windows, annotations) unavailable",
}

# Fallbacks used when an export lacks its ENUM_* tables (values as nsys numbers them).
MEMCPY_KINDS = {0: "<unknown>", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD",
                7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH",
                13: "UVM DtoD"}
MEM_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
             6: "Managed Static", 7: "Unknown"}
PTOP = "PtoP"
# Kineto's names for CUPTI synchronization types (libkineto syncTypeString), by CUPTI enum suffix.
SYNC_NAMES_BY_SUFFIX = {"EVENT_SYNCHRONIZE": "Event Sync", "STREAM_WAIT_EVENT": "Stream Wait Event",
                        "STREAM_SYNCHRONIZE": "Stream Sync", "CONTEXT_SYNCHRONIZE": "Context Sync"}
SYNC_NAMES = {1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
UNKNOWN_SYNC = "Unknown Sync"
# NVTX range event types (ENUM_NSYS_EVENT_TYPE): push/pop and start/end, NVTX and NVTX-text.
NVTX_RANGE_TYPES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxtPushPopRange": 70,
                    "NvtxtStartEndRange": 71}
RUNTIME_VERSION_SUFFIX = re.compile(r"_v\d+$")  # "cudaStreamSynchronize_v3020" -> Kineto's name

# Process environment variables that carry the global rank / world size, most specific first.
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "PALS_RANKID", "LOCAL_RANK")
WORLD_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
ENV_ASSIGNMENT = re.compile(r'^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"?(.*?)"?\s*$')
# NCCL's NVTX payload schema names these fields (exported as JSON when the export includes it).
NCCL_PAYLOAD_RANK = re.compile(r'"Rank"\s*:\s*(\d+)')
NCCL_PAYLOAD_NRANKS = re.compile(r'"No\. of ranks"\s*:\s*(\d+)')

# Where nsys usually lives when it is not on PATH.
NSYS_INSTALL_GLOBS = (
    "/opt/nvidia/nsight-systems*/bin",
    "/opt/nvidia/nsight-systems/*/bin",
    "/opt/nvidia/nsight-systems*/target-linux-x64",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64",
    "/usr/local/cuda*/bin",
    "/usr/local/cuda*/nsight-systems*/bin",
)


# --------------------------------------------------------------------------------------------
# .nsys-rep: find nsys, export to the cache
# --------------------------------------------------------------------------------------------

def is_nsys_rep(path: str | Path) -> bool:
    """True for an Nsight Systems report (by name or by its header), not for an SQLite export."""
    p = Path(path)
    if p.name.endswith(REP_SUFFIXES):
        return True
    try:
        with p.open("rb") as fh:
            head = fh.read(REP_HEADER_BYTES)
    except OSError:
        return False
    return not head.startswith(SQLITE_MAGIC) and REP_VERSION.search(head) is not None


def nsys_rep_version(path: str | Path) -> str | None:
    """The nsys version that wrote a report, from its header ("2024.6.2.25"), or None."""
    try:
        with Path(path).open("rb") as fh:
            head = fh.read(REP_HEADER_BYTES)
    except OSError:
        return None
    m = REP_VERSION.search(head)
    if not m:
        return None
    return ".".join(g.decode() for g in m.groups() if g is not None)


def find_nsys() -> str | None:
    """The nsys executable: $NSYS (file or folder), then PATH, then the usual install folders."""
    candidates: list[Path] = []
    env = os.environ.get("NSYS")
    if env:
        p = Path(env)
        candidates.append(p / "nsys" if p.is_dir() else p)
    on_path = shutil.which("nsys")
    if on_path:
        candidates.append(Path(on_path))
    for pattern in NSYS_INSTALL_GLOBS:
        # Newest install first (names carry the version).
        candidates += [Path(d) / "nsys" for d in sorted(glob.glob(pattern), reverse=True)]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return None


def cache_dir() -> Path:
    """Where exports of .nsys-rep reports are kept (the user cache dir, never beside the input)."""
    return Path(user_cache_dir("overlapscope")) / "nsys"


def _cache_paths(path: Path) -> tuple[Path, Path]:
    """(export, sidecar) in the cache, keyed by the report's resolved path, size and mtime."""
    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:20]
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", path.name)[:60]
    base = cache_dir() / f"{stem}-{key}"
    return base.with_name(base.name + ".sqlite"), base.with_name(base.name + ".json")


def export_command(path: Path, output: Path | None = None) -> str:
    """The exact shell command that exports a report to SQLite."""
    out = output if output is not None else path.with_name(path.name.rsplit(".", 1)[0] + ".sqlite")
    return f"nsys export --type sqlite --output {shlex.quote(str(out))} {shlex.quote(str(path))}"


def nsys_rep_to_sqlite(path: str | Path) -> Path:
    """Export a .nsys-rep with the user's nsys into the cache (reused while the report is unchanged)."""
    path = Path(path)
    if not path.is_file():
        raise BadInputError(path, "no such file")
    out, sidecar = _cache_paths(path)
    if out.is_file() and sidecar.is_file():
        return out
    version = nsys_rep_version(path)
    written_by = f"written by nsys {version}" if version else "nsys version unknown"
    nsys = find_nsys()
    if nsys is None:
        raise BadInputError(
            path, f"Nsight Systems report ({written_by}) and no nsys here to read it (looked in $NSYS, "
                  f"PATH, /opt/nvidia, /usr/local/cuda*); export it with nsys {version or ''} or newer: "
                  f"`{export_command(path)}`, then load the .sqlite".replace("  ", " "))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.stem}.part-{os.getpid()}.sqlite")
    cmd = [nsys, "export", "--type", "sqlite", "--output", str(tmp), str(path)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not tmp.is_file():
            lines = [ln.strip() for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
            why = lines[-1] if lines else f"exit status {proc.returncode}"
            raise BadInputError(path, f"nsys export failed ({why}); report {written_by}, nsys used: {nsys}")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    sidecar.write_text(json.dumps({"source": str(path), "nsys": nsys, "report_version": version}))
    return out


def _source_label(sqlite_path: Path) -> str | None:
    """The report a cached export was made from (so traces name the user's file, not the cache)."""
    try:
        if sqlite_path.resolve().parent != cache_dir().resolve():
            return None
        sidecar = sqlite_path.with_suffix(".json")
        return str(json.loads(sidecar.read_text())["source"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


# --------------------------------------------------------------------------------------------
# Opening and introspecting an export
# --------------------------------------------------------------------------------------------

def _check_sqlite_file(path: Path, label: str | Path) -> None:
    """Refuse what is not a whole SQLite file before SQLite reads past its end."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(100)
    except FileNotFoundError:
        raise BadInputError(label, "no such file") from None
    except OSError as exc:
        raise BadInputError(label, f"cannot read file ({exc.strerror or exc})") from None
    if not head.startswith(SQLITE_MAGIC):
        raise BadInputError(label, "not an SQLite file (expected an `nsys export --type sqlite` export)")
    if len(head) < 100:
        raise BadInputError(label, "truncated SQLite file (shorter than its 100-byte header)")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    n_pages = int.from_bytes(head[28:32], "big")
    # The in-header page count is valid when "version-valid-for" equals the change counter.
    if n_pages and head[92:96] == head[24:28] and page_size * n_pages > size:
        raise BadInputError(label, f"truncated SQLite file: its header says {page_size * n_pages:,} bytes, "
                                   f"the file has {size:,}")


def _one_line(exc: BaseException) -> str:
    cause = exc.__cause__ or exc
    text = str(cause).strip().splitlines()
    return text[0] if text else type(cause).__name__


@dataclass
class _Export:
    """An export opened read-only and immutable, with cached introspection and string table."""

    path: Path
    label: str
    conn: sqlite3.Connection
    db: sqlite_utils.Database
    tables: set[str]
    _columns: dict[str, dict[str, Any]] = field(default_factory=dict)
    _strings: tuple[pd.Index, np.ndarray] | None = None

    @classmethod
    def open(cls, path: Path, label: str) -> _Export:
        _check_sqlite_file(path, label)
        uri = path.resolve().as_uri() + "?mode=ro&immutable=1"
        try:
            conn = sqlite3.connect(uri, uri=True)
            db = sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)
            tables = set(db.table_names())
        except sqlite3.DatabaseError as exc:
            raise BadInputError(label, f"corrupt SQLite file ({_one_line(exc)})") from None
        ex = cls(path=path, label=label, conn=conn, db=db, tables=tables)
        if not ex.looks_like_nsys():
            conn.close()
            raise BadInputError(label, "an SQLite file, but not an Nsight Systems export (no StringIds, "
                                       "CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS tables)")
        return ex

    def close(self) -> None:
        self.conn.close()

    def looks_like_nsys(self) -> bool:
        activity = any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in self.tables) or T_NVTX in self.tables
        marker = any(t in self.tables for t in META_EXPORT_TABLES) or "TARGET_INFO_SESSION_START_TIME" in self.tables
        return T_STRINGS in self.tables and (activity or marker)

    def has(self, table: str) -> bool:
        return table in self.tables

    def columns(self, table: str) -> dict[str, Any]:
        if table not in self._columns:
            try:
                self._columns[table] = self.db[table].columns_dict if table in self.tables else {}
            except sqlite3.DatabaseError as exc:
                raise BadInputError(self.label, f"corrupt or truncated SQLite file ({_one_line(exc)})") from None
        return self._columns[table]

    def first_column(self, table: str, *candidates: str) -> str | None:
        cols = self.columns(table)
        return next((c for c in candidates if c in cols), None)

    def query(self, sql: str) -> pd.DataFrame:
        """Read in chunks: the rows SQLite hands over as Python tuples are the peak-memory cost,
        so only QUERY_CHUNK_ROWS of them exist at a time."""
        try:
            chunks = list(pd.read_sql_query(sql, self.conn, chunksize=QUERY_CHUNK_ROWS))
            if not chunks:  # no rows: one empty read gives the column names
                return pd.read_sql_query(sql, self.conn)
            return chunks[0] if len(chunks) == 1 else pd.concat(chunks, ignore_index=True)
        except (sqlite3.DatabaseError, pd.errors.DatabaseError) as exc:
            raise BadInputError(self.label, f"corrupt or truncated SQLite file ({_one_line(exc)})") from None

    def strings(self, ids: np.ndarray) -> np.ndarray:
        """StringIds lookup, vectorized (ids missing from the table give "")."""
        if self._strings is None:
            if self.has(T_STRINGS):
                df = self.query(f"SELECT id, value FROM {T_STRINGS}")
                values = df["value"].fillna("").to_numpy(dtype=object)
                self._strings = (pd.Index(df["id"].to_numpy(dtype=np.int64)), values)
            else:
                self._strings = (pd.Index(np.zeros(0, dtype=np.int64)), np.zeros(0, dtype=object))
        index, values = self._strings
        ids = np.asarray(ids, dtype=np.int64)
        pos = index.get_indexer(ids) if len(index) else np.full(ids.size, -1)
        out = values[np.clip(pos, 0, None)] if values.size else np.full(ids.size, "", dtype=object)
        out = np.asarray(out, dtype=object)
        out[pos < 0] = ""
        return out

    def text_column(self, series: pd.Series) -> np.ndarray:
        """A name column that holds StringIds ids (most versions) or the text itself (some)."""
        if pd.api.types.is_numeric_dtype(series.dtype):
            return self.strings(series.fillna(-1).to_numpy(dtype=np.int64))
        return series.fillna("").astype(str).to_numpy(dtype=object)

    def enum(self, table: str, column: str = "label") -> dict[int, str]:
        if not self.has(table) or column not in self.columns(table):
            return {}
        df = self.query(f"SELECT id, {column} AS v FROM {table}")
        return {int(i): str(v) for i, v in zip(df["id"], df["v"], strict=True) if v is not None}


def _pid_expr(ex: _Export, table: str) -> str | None:
    col = ex.first_column(table, "globalPid", "globalTid")
    return PID_SQL.format(col=col) if col else None


def _opt(ex: _Export, table: str, column: str, fill: int | str = -1) -> str:
    """`coalesce(column, fill)` when the column exists, else the fill (keeps ints from turning float)."""
    if column in ex.columns(table):
        return f'coalesce("{column}", {fill})'
    return str(fill)


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
    return f'SELECT {", ".join(cols)} FROM {table} WHERE start IS NOT NULL AND "end" IS NOT NULL'


def _read_kernels(ex: _Export, pid: str) -> pd.DataFrame:
    name_cols = [c for c in ("demangledName", "shortName", "mangledName") if c in ex.columns(T_KERNEL)]
    if not name_cols:
        name_cols_sql = ["'' AS demangledName"]
        name_cols = ["demangledName"]
    else:
        name_cols_sql = [f'"{c}"' for c in name_cols]
    df = ex.query(_activity_sql(ex, T_KERNEL, name_cols_sql, pid))
    # Prefer the demangled name (what Kineto shows), then the short, then the mangled one.
    name = np.full(len(df), "", dtype=object)
    for c in reversed(name_cols):
        text = ex.text_column(df[c])
        name = np.where(text != "", text, name)
    out = df[["start_ns", "end_ns", "device", "stream", "correlation", "pid"]].copy()
    out["name"] = name
    out["kind"] = "kernel"
    return out


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
    out["name"] = names
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
    out["name"] = labels[codes] if len(df) else np.zeros(0, dtype=object)
    out["kind"] = "memset"
    return out


def _read_runtime(ex: _Export) -> pd.DataFrame:
    t = T_RUNTIME
    tid_col = ex.first_column(t, "globalTid", "globalPid")
    if tid_col is None:
        return pd.DataFrame()
    name_col = ex.first_column(t, "nameId", "name")
    name_sql = f'"{name_col}" AS name' if name_col else "'' AS name"
    df = ex.query(
        f'SELECT start AS start_ns, "end" AS end_ns, {_opt(ex, t, "correlationId")} AS correlation, '
        f'{PID_SQL.format(col=tid_col)} AS pid, '
        f'{TID_SQL.format(col=tid_col) if tid_col == "globalTid" else "0"} AS tid, {name_sql} '
        f'FROM {t} WHERE start IS NOT NULL AND "end" IS NOT NULL')
    df["name"] = ex.text_column(df["name"])
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
    df["name"] = labels[codes] if len(df) else np.zeros(0, dtype=object)
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
        f'FROM {t} WHERE start IS NOT NULL AND "end" IS NOT NULL AND "end" >= start{type_filter}')
    text = df["text"].to_numpy(dtype=object)
    from_ids = ex.strings(df["text_id"].to_numpy(dtype=np.int64))
    df["name"] = np.where(pd.isna(text), from_ids, text)
    return df.drop(columns=["text", "text_id"])


def _by_pid(df: pd.DataFrame | None) -> dict[int, pd.DataFrame]:
    if df is None or df.empty:
        return {}
    return {int(p): g for p, g in df.groupby("pid", sort=True)}


# --------------------------------------------------------------------------------------------
# File-level facts: versions, processes, devices, environment, NCCL payloads
# --------------------------------------------------------------------------------------------

def _key_values(ex: _Export, table: str, where: str = "") -> list[tuple[str, str]]:
    cols = ex.columns(table)
    if "name" not in cols or "value" not in cols:
        return []
    df = ex.query(f"SELECT name, value FROM {table}{where}")
    return [(str(n), "" if v is None else str(v)) for n, v in zip(df["name"], df["value"], strict=True)]


def _export_meta(ex: _Export) -> dict[str, Any]:
    table = next((t for t in META_EXPORT_TABLES if ex.has(t)), None)
    kv = dict(_key_values(ex, table)) if table else {}
    meta: dict[str, Any] = {
        "nsys_version": kv.get("EXPORT_PRODUCT_VERSION"),
        "export_schema_version": kv.get("EXPORT_SCHEMA_VERSION"),
    }
    if ex.has("TARGET_INFO_SESSION_START_TIME") and "utcEpochNs" in ex.columns("TARGET_INFO_SESSION_START_TIME"):
        df = ex.query("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
        if len(df) and pd.notna(df.iloc[0, 0]):
            meta["session_start_utc_ns"] = int(df.iloc[0, 0])
    return meta


def _hostname(ex: _Export) -> str:
    if not ex.has(SYSTEM_ENV_TABLE):
        return ""
    kv = _key_values(ex, SYSTEM_ENV_TABLE, " WHERE name = 'Hostname'")
    return kv[0][1] if kv else ""


def _process_names(ex: _Export) -> dict[int, str]:
    if not ex.has(T_PROCESSES) or "globalPid" not in ex.columns(T_PROCESSES):
        return {}
    name = "name" if "name" in ex.columns(T_PROCESSES) else "''"
    df = ex.query(f"SELECT {PID_SQL.format(col='globalPid')} AS pid, {name} AS name FROM {T_PROCESSES}")
    return {int(p): str(n or "") for p, n in zip(df["pid"], df["name"], strict=True)}


def _devices(ex: _Export) -> dict[int, str]:
    for table in GPU_INFO_TABLES:
        if not ex.has(table):
            continue
        id_col = ex.first_column(table, "cuDevice", "cudaId", "id", "deviceId")
        if id_col is None or "name" not in ex.columns(table):
            continue
        df = ex.query(f'SELECT "{id_col}" AS id, name FROM {table}')
        return {int(i): str(n) for i, n in zip(df["id"], df["name"], strict=True) if pd.notna(i)}
    return {}


def _parse_env(assignments: list[str]) -> dict[str, str]:
    """Only the rank / world-size variables: the rest of the environment is private."""
    wanted = set(RANK_VARS) | set(WORLD_VARS)
    out: dict[str, str] = {}
    for a in assignments:
        m = ENV_ASSIGNMENT.match(a)
        if m and m.group(1) in wanted:
            out[m.group(1)] = m.group(2)
    return out


def _launch_env(ex: _Export) -> dict[str, str] | None:
    """Rank variables of the process nsys launched (META_DATA_CAPTURE), None if they disagree."""
    if not ex.has(T_CAPTURE):
        return {}
    rows = _key_values(ex, T_CAPTURE, " WHERE name LIKE 'PROCESS_%:ENVIRONMENT_VARIABLE'")
    per_process: dict[str, list[str]] = {}
    for name, value in rows:
        per_process.setdefault(name.split(":", 1)[0], []).append(value)
    envs = [_parse_env(v) for v in per_process.values()]
    envs = [e for e in envs if e]
    if not envs:
        return {}
    return envs[0] if all(e == envs[0] for e in envs) else None


def _process_env_tables(ex: _Export) -> dict[int, dict[str, str]]:
    """Per-process environment, from any exported table of (process, name, value) rows."""
    out: dict[int, dict[str, str]] = {}
    for table in sorted(ex.tables):
        if "ENV" not in table.upper() or table == SYSTEM_ENV_TABLE:
            continue
        pid_col = ex.first_column(table, "globalPid", "globalTid")
        name_col = ex.first_column(table, "name", "nameId")
        value_col = ex.first_column(table, "value", "valueId")
        if not (pid_col and name_col and value_col):
            continue
        df = ex.query(f'SELECT {PID_SQL.format(col=pid_col)} AS pid, "{name_col}" AS name, '
                      f'"{value_col}" AS value FROM {table}')
        names, values = ex.text_column(df["name"]), ex.text_column(df["value"])
        keep = np.isin(names, list(RANK_VARS + WORLD_VARS))
        for p, n, v in zip(df["pid"].to_numpy()[keep], names[keep], values[keep], strict=True):
            out.setdefault(int(p), {})[str(n)] = str(v).strip('"')
    return out


def _nccl_payload_ranks(ex: _Export) -> dict[int, tuple[int, int]]:
    """pid -> (rank, nranks) of its largest NCCL communicator, from NVTX payloads exported as JSON."""
    cols = ex.columns(T_NVTX)
    if "globalTid" not in cols or not ({"jsonText", "jsonTextId"} & set(cols)):
        return {}
    parts = []
    if "jsonText" in cols:
        parts.append('"jsonText"')
    json_sql = f"coalesce({', '.join(parts + ['NULL'])})"
    id_sql = _opt(ex, T_NVTX, "jsonTextId")
    df = ex.query(f"SELECT {PID_SQL.format(col='globalTid')} AS pid, {json_sql} AS js, {id_sql} AS js_id "
                  f"FROM {T_NVTX} WHERE {json_sql} IS NOT NULL OR {id_sql} >= 0")
    if df.empty:
        return {}
    text = np.where(pd.isna(df["js"].to_numpy(dtype=object)), ex.strings(df["js_id"].to_numpy(np.int64)),
                    df["js"].to_numpy(dtype=object))
    best: dict[int, tuple[int, int] | None] = {}
    for p, js in zip(df["pid"].to_numpy(), text, strict=True):  # only payload rows: a handful per rank
        rank_m, n_m = NCCL_PAYLOAD_RANK.search(str(js)), NCCL_PAYLOAD_NRANKS.search(str(js))
        if not (rank_m and n_m):
            continue
        cand = (int(rank_m.group(1)), int(n_m.group(1)))
        prev = best.get(int(p), (-1, 0))
        if prev is None or cand[1] < prev[1]:
            continue
        best[int(p)] = None if (cand[1] == prev[1] and cand[0] != prev[0]) else cand
    return {p: v for p, v in best.items() if v is not None}


@dataclass
class _RankInfo:
    rank: int
    world_size: int | None
    source: str


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(str(text).strip()) if text is not None else None
    except ValueError:
        return None


def _from_env(env: dict[str, str]) -> tuple[int, int | None, str] | None:
    for var in RANK_VARS:
        rank = _int_or_none(env.get(var))
        if rank is not None:
            world = next((w for v in WORLD_VARS if (w := _int_or_none(env.get(v))) is not None), None)
            return rank, world, f"environment {var}"
    return None


def _assign_ranks(ex: _Export, pids: list[int]) -> dict[int, _RankInfo]:
    """Rank per process: its environment, else NCCL NVTX payloads, else process (pid) order."""
    per_proc = _process_env_tables(ex)
    found = {p: _from_env(per_proc.get(p, {})) for p in pids}
    if all(found.values()) and len({f[0] for f in found.values()}) == len(pids):  # type: ignore[index]
        return {p: _RankInfo(f[0], f[1], f[2]) for p, f in found.items() if f}
    if len(pids) == 1:
        launched = _launch_env(ex)
        env = _from_env(launched) if launched else None
        if env is not None:
            return {pids[0]: _RankInfo(env[0], env[1], env[2])}
    nccl = _nccl_payload_ranks(ex)
    if all(p in nccl for p in pids) and len({nccl[p][0] for p in pids}) == len(pids):
        world = max(nccl[p][1] for p in pids)
        return {p: _RankInfo(nccl[p][0], world, "NCCL NVTX payload") for p in pids}
    if len(pids) == 1:
        return {pids[0]: _RankInfo(0, None, "default")}
    return {p: _RankInfo(i, len(pids), "process order") for i, p in enumerate(pids)}


# --------------------------------------------------------------------------------------------
# Building one RankTrace per process
# --------------------------------------------------------------------------------------------

def _intern(names: NameTable, values: np.ndarray, transform=None) -> np.ndarray:
    """Name ids for a string column; `transform` runs once per distinct string."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.int32)
    codes, uniques = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=False)
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
    for col in ("bytes", "src_device", "dst_device"):
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
    notes = [msg for table, msg in OPTIONAL_TABLES.items() if not ex.has(table)]

    gpu_parts: list[pd.DataFrame] = []
    for table, reader in ((T_KERNEL, _read_kernels), (T_MEMCPY, _read_memcpy), (T_MEMSET, _read_memset)):
        if not ex.has(table):
            continue
        pid = _pid_expr(ex, table)
        if pid is None:
            notes.append(f"{table} has no globalPid column: its rows are given to the process whose "
                         "API calls launched them")
            pid = "-1"
        gpu_parts.append(reader(ex, pid))
    runtime = _read_runtime(ex) if ex.has(T_RUNTIME) else None
    syncs = None
    if ex.has(T_SYNC):
        sync_pid = _pid_expr(ex, T_SYNC)
        syncs = _read_syncs(ex, sync_pid or "-1")
    nvtx = _read_nvtx(ex) if ex.has(T_NVTX) else None

    gpu_all = pd.concat([p for p in gpu_parts if len(p)], ignore_index=True) if any(
        len(p) for p in gpu_parts) else None
    known: set[int] = set()
    for df in (gpu_all, runtime):
        if df is not None and len(df):
            known |= {int(x) for x in df["pid"].unique() if x >= 0}
    unattributed = [df for df in (gpu_all, syncs) if df is not None and (df["pid"] < 0).any()]
    if unattributed:
        owner = _owner_of_unattributed(unattributed, runtime, known)
        if owner is None:
            raise BadInputError(source, "GPU activity has no process ids (no globalPid column) and the "
                                        "export holds several CUDA processes: cannot tell them apart")
        for df in unattributed:
            df.loc[df["pid"] < 0, "pid"] = owner
    if not known:
        raise BadInputError(source, "no CUDA activity in this export (no kernels, copies or CUDA API "
                                    "calls): profile with `nsys profile --trace=cuda,nvtx`")
    proc_names = _process_names(ex)
    pids = _rank_processes(gpu_all, known, proc_names, notes)

    nccl_nvtx = nvtx is not None and any(str(n).startswith("nccl") for n in pd.unique(nvtx["name"]))
    gpu_by, rt_by, sync_by, nvtx_by = _by_pid(gpu_all), _by_pid(runtime), _by_pid(syncs), _by_pid(nvtx)
    del gpu_parts, gpu_all, runtime, syncs, nvtx  # the per-process copies are all that is needed now
    if nccl_nvtx and not _nccl_payload_ranks(ex):
        notes.append("NCCL NVTX ranges carry no payload in this export (`nsys export --include-json true` "
                     "keeps them): communicators and message sizes unknown")
    ranks = _assign_ranks(ex, pids)
    meta_file = _export_meta(ex)
    hostname = _hostname(ex)
    devices = _devices(ex)
    if not devices:
        notes.append("GPU names unknown (no TARGET_INFO_GPU table)")

    traces = []
    for p in pids:
        names = NameTable()
        gpu = _gpu_table([gpu_by.pop(p, None)], names)
        trace_notes = list(notes)
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
            runtime=_runtime_table(rt_by.pop(p, None), names, trace_notes),
            host_ops=_host_table(nvtx_by.pop(p, None), names),
            sync_events=_sync_table(sync_by.pop(p, None), names),
            world_size=info.world_size,
            rank_source=info.source,
            hostname=hostname,
            pid=p,
            devices=dict(devices),
            meta={**meta_file, "process_name": proc_names.get(p, ""), "sqlite": str(sqlite_path),
                  "devices_used": sorted(int(d) for d in used), "n_processes": len(pids)},
            notes=trace_notes,
        ))
    return sorted(traces, key=lambda t: t.rank)
