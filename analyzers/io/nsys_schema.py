"""An nsys SQLite export opened read-only: its tables and columns probed (schemas vary by nsys version)."""

from __future__ import annotations

import math
import os
import shutil
import sqlite3
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import sqlite_utils

from analyzers.errors import BadInputError
from analyzers.io.nsys_rep import SQLITE_MAGIC

QUERY_CHUNK_ROWS = 100_000  # rows per fetch when reading a table (bounds peak memory)
# Every query is bounded: its time (checked every PROGRESS_STEPS SQLite steps) and SQLite's memory.
ENV_SQL_SECONDS = "OVERLAPSCOPE_SQL_SECONDS"
ENV_SQL_MB = "OVERLAPSCOPE_SQL_MB"
DEFAULT_SQL_SECONDS = 600.0  # a 10 GB export's kernel table reads in about a minute
DEFAULT_SQL_MB = 2048  # the reads stream rows: SQLite itself needs a few MB of page cache
PROGRESS_STEPS = 10_000

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


def quote(identifier: str) -> str:
    """An SQL identifier (a table or column name read from the file) as a quoted literal name:
    whatever the file named it, it can only ever name a table or column, never add SQL."""
    return '"' + identifier.replace('"', '""') + '"'


def _pending_journal(path: Path) -> Path | None:
    """A `-wal` file with frames, or a non-empty rollback `-journal`, beside the export: changes
    SQLite would apply (WAL) or roll back (hot journal) before anyone reads the database."""
    for suffix, header in (("-wal", 32), ("-journal", 0)):
        journal = path.with_name(path.name + suffix)
        try:
            if journal.is_file() and journal.stat().st_size > header:
                return journal
        except OSError:
            continue
    return None


def _query_limits() -> tuple[float, int]:
    """(seconds one query may run, bytes of SQLite memory, temporary tables included), from the environment."""
    def number(name: str, default: float) -> float:
        try:
            value = float(os.environ.get(name, default))
        except ValueError:
            return default
        return value if math.isfinite(value) and value > 0 else default

    return number(ENV_SQL_SECONDS, DEFAULT_SQL_SECONDS), int(number(ENV_SQL_MB, DEFAULT_SQL_MB)) << 20


@dataclass
class _Export:
    """An export opened read-only (immutable, or a private copy where a journal must be applied), with
    cached introspection and string table; every query bounded in time and memory."""

    path: Path
    label: str
    conn: sqlite3.Connection
    db: sqlite_utils.Database
    tables: set[str]
    copy_dir: str | None = None  # the private copy's folder, removed on close
    seconds: float = DEFAULT_SQL_SECONDS  # one query's time limit
    heap: int = DEFAULT_SQL_MB << 20  # SQLite's memory limit
    deadline: float = 0.0  # monotonic time the running query must end by
    _columns: dict[str, dict[str, Any]] = field(default_factory=dict)
    _strings: tuple[pd.Index, np.ndarray] | None = None

    @classmethod
    def open(cls, path: Path, label: str) -> _Export:
        _check_sqlite_file(path, label)
        journal = _pending_journal(path)
        copy_dir = _private_copy(path, journal, label) if journal is not None else None
        uri = (Path(copy_dir, path.name).as_uri() + "?mode=rw" if copy_dir
               else path.resolve().as_uri() + "?mode=ro&immutable=1")
        try:
            conn = sqlite3.connect(uri, uri=True)
            db = sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)
            conn.execute("PRAGMA temp_store = MEMORY")  # temporary tables count against the heap limit
            conn.execute("PRAGMA query_only = 1")
            tables = set(db.table_names())
        except sqlite3.DatabaseError as exc:
            _remove(copy_dir)
            raise BadInputError(label, f"corrupt SQLite file ({_one_line(exc)})") from None
        ex = cls(path=path, label=label, conn=conn, db=db, tables=tables, copy_dir=copy_dir)
        ex._bound_queries()
        if not ex.looks_like_nsys():
            ex.close()
            raise BadInputError(label, "an SQLite file, but not an Nsight Systems export (no StringIds, "
                                       "CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS tables)")
        return ex

    def _bound_queries(self) -> None:
        """Each query stops once it runs past its time (a progress handler: SQLite asks it every
        PROGRESS_STEPS virtual-machine steps), and SQLite's heap, temporary tables included, is capped."""
        self.seconds, self.heap = _query_limits()
        current = self.conn.execute("PRAGMA hard_heap_limit").fetchone()[0]
        if not current or current > self.heap:  # process-wide in SQLite: only ever lowered here
            self.conn.execute(f"PRAGMA hard_heap_limit = {int(self.heap)}")
        self.conn.set_progress_handler(lambda: int(time.monotonic() > self.deadline), PROGRESS_STEPS)

    def close(self) -> None:
        self.conn.close()
        _remove(self.copy_dir)

    def looks_like_nsys(self) -> bool:
        activity = any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in self.tables) or T_NVTX in self.tables
        marker = any(t in self.tables for t in META_EXPORT_TABLES) or "TARGET_INFO_SESSION_START_TIME" in self.tables
        return T_STRINGS in self.tables and (activity or marker)

    def has(self, table: str) -> bool:
        return table in self.tables

    def columns(self, table: str) -> dict[str, Any]:
        """The table's column names -> declared types (the name bound as a parameter, never pasted)."""
        if table not in self._columns:
            self.deadline = time.monotonic() + self.seconds
            try:
                rows = (self.conn.execute("SELECT name, type FROM pragma_table_info(?)", (table,)).fetchall()
                        if table in self.tables else [])
            except (sqlite3.DatabaseError, MemoryError) as exc:
                raise BadInputError(self.label, self._query_problem(exc)) from None
            self._columns[table] = {str(n): t for n, t in rows}
        return self._columns[table]

    def first_column(self, table: str, *candidates: str) -> str | None:
        cols = self.columns(table)
        return next((c for c in candidates if c in cols), None)

    def query(self, sql: str) -> pd.DataFrame:
        """Read in chunks: the rows SQLite hands over as Python tuples are the peak-memory cost,
        so only QUERY_CHUNK_ROWS of them exist at a time."""
        self.deadline = time.monotonic() + self.seconds
        try:
            chunks = list(pd.read_sql_query(sql, self.conn, chunksize=QUERY_CHUNK_ROWS))
            if not chunks:  # no rows: one empty read gives the column names
                return pd.read_sql_query(sql, self.conn)
            df = chunks[0] if len(chunks) == 1 else pd.concat(chunks, ignore_index=True)
        except (sqlite3.DatabaseError, pd.errors.DatabaseError, MemoryError) as exc:
            raise BadInputError(self.label, self._query_problem(exc)) from None
        self._integer_times(df)
        return df

    def _query_problem(self, exc: BaseException) -> str:
        text = _one_line(exc)
        if time.monotonic() > self.deadline or "interrupted" in text:
            return (f"reading the export took longer than {self.seconds:g} s for one query "
                    f"(set {ENV_SQL_SECONDS} to allow more)")
        if isinstance(exc.__cause__ or exc, MemoryError) or "out of memory" in text:
            return (f"reading the export needed more than {self.heap >> 20:,} MB of SQLite memory "
                    f"(set {ENV_SQL_MB} to allow more)")
        return f"corrupt or truncated SQLite file ({text})"

    def _integer_times(self, df: pd.DataFrame) -> None:
        """nsys writes times as integer ns; anything else (a REAL such as 9.2e18, text) would wrap
        or fail in the int64 tables, so it is refused by name (found by tests/test_fuzz.py)."""
        for col in ("start_ns", "end_ns"):
            if col in df.columns and len(df) and not pd.api.types.is_integer_dtype(df[col].dtype):
                odd = next((v for v in df[col] if not isinstance(v, int)), df[col].iloc[0])
                raise BadInputError(self.label, f"an activity's {col[:-3]} time is not integer nanoseconds "
                                                f"({odd!r}): not what nsys writes")

    def strings(self, ids: np.ndarray) -> np.ndarray:
        """StringIds lookup, vectorized (ids missing from the table give "")."""
        if self._strings is None:
            if self.has(T_STRINGS):
                df = self.query(f"SELECT id, value FROM {quote(T_STRINGS)}")
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

    def missing_strings(self, ids: np.ndarray) -> np.ndarray:
        """Per id: it is given (not NULL) but StringIds holds no such id."""
        self.strings(np.zeros(0, dtype=np.int64))  # loads the table once
        index, _ = self._strings
        ids = np.asarray(ids, dtype=np.float64)
        given = ~np.isnan(ids)
        pos = index.get_indexer(np.where(given, ids, -1).astype(np.int64)) if len(index) else np.full(ids.size, -1)
        return given & (pos < 0)

    def text_column(self, series: pd.Series) -> np.ndarray:
        """A name column that holds StringIds ids (most versions) or the text itself (some)."""
        if pd.api.types.is_numeric_dtype(series.dtype):
            return self.strings(series.fillna(-1).to_numpy(dtype=np.int64))
        return series.fillna("").astype(str).to_numpy(dtype=object)

    def enum(self, table: str, column: str = "label") -> dict[int, str]:
        if not self.has(table) or column not in self.columns(table):
            return {}
        df = self.query(f"SELECT id, {quote(column)} AS v FROM {quote(table)}")
        return {int(i): str(v) for i, v in zip(df["id"], df["v"], strict=True) if v is not None}


def _pid_expr(ex: _Export, table: str) -> str | None:
    col = ex.first_column(table, "globalPid", "globalTid")
    return PID_SQL.format(col=quote(col)) if col else None


def _private_copy(path: Path, journal: Path, label: str) -> str:
    """The export and its journal copied into a private folder, where SQLite applies the journal (a
    WAL's committed changes, or a hot journal's rollback) to the copy: what SQLite itself would read,
    while the input and its journal stay exactly as they are."""
    from analyzers.io.environment import cache_base

    base = cache_base()
    try:
        base.mkdir(parents=True, exist_ok=True)
        folder = tempfile.mkdtemp(prefix=".journal-", dir=base)
    except OSError:
        folder = tempfile.mkdtemp(prefix="overlapscope-journal-")
    try:
        shutil.copyfile(path, Path(folder, path.name))
        shutil.copyfile(journal, Path(folder, path.name + journal.name[len(path.name):]))
    except OSError as exc:
        _remove(folder)
        raise BadInputError(label, f"has a pending {journal.name[len(path.name) + 1:]} journal ({journal.name}), "
                                   f"and a private copy to apply it to could not be made ({exc.strerror or exc})"
                            ) from None
    return folder


def _remove(folder: str | None) -> None:
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


def _opt(ex: _Export, table: str, column: str, fill: int | str = -1) -> str:
    """`coalesce(column, fill)` when the column exists, else the fill (keeps ints from turning float)."""
    if column in ex.columns(table):
        return f"coalesce({quote(column)}, {fill})"
    return str(fill)
