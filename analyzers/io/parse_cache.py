"""Parse cache: the compact per-rank tables of a trace file, kept as Parquet in the user cache.

Parsing a large trace costs seconds; reading its tables back costs milliseconds. An entry is
keyed by the file's resolved path, the SHA-256 of its bytes (analyzers/io/content_key.py: size and
mtime can be put back by a writer, the bytes cannot), the loader version and the --rank given,
so a changed file or a changed loader never hits an old entry. An entry is a folder holding
one Parquet file per table plus a small JSON header (which also holds the name table); it is
written to a temporary folder and renamed into place, so readers never see half an entry.
Categorical and string columns are stored dictionary-encoded, integers delta-encoded (times,
ids and counters mostly climb by small steps; a quarter of the plain size, read as quickly),
LZ4 on top; reads and writes stay on the calling thread (workers already fill the cores).

Every file of an entry has its SHA-256 in the entry's ``sums.json``; a read checks them all (one
read of each file: the bytes hashed are the bytes parsed). Anything odd on reading (a checksum that
does not match, a file missing or added, bad Parquet, a header that does not match) makes the entry a
miss: it is removed and the trace parsed again, with a note on the trace saying so, never trusted.
The cache holds at most MAX_ENTRIES entries and MAX_BYTES bytes; the least recently used go first.

Location: ``$OVERLAPSCOPE_CACHE_DIR`` if set, else the platform's user cache directory
(platformdirs), sub-folder ``parsed``. ``overlapscope cache info`` / ``cache clear`` show and
empty it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from analyzers.io.content_key import file_digest, stat_token
from analyzers.io.environment import (  # noqa: F401 (ENV_CACHE_DIR: tests set it)
    ENV_CACHE_DIR,
    CacheInfo,
    cache_base,
    cache_entries,
    clear_folder,
    evict_oldest,
    folder_info,
    touch,
)
from analyzers.io.kineto import LOADER_VERSION as KINETO_LOADER_VERSION
from analyzers.timeline.model import NameTable, RankTrace, require_host_tables

# The nsys reader's table layout version: bump when analyzers' nsys loader changes its output.
# 2: runtime calls recorded twice are dropped; 3: input limits (rows ending before they start refused);
# 4: NCCL NVTX payloads fill message sizes, communicators and group sizes; 5: kernels' grid, block,
# registers and shared memory, SM limits
NSYS_LOADER_VERSION = 5
# 2: names in the header, categoricals stored as dictionaries
CACHE_VERSION = f"2-k{KINETO_LOADER_VERSION}-n{NSYS_LOADER_VERSION}"
TABLES = ("gpu", "runtime", "host_ops", "sync_events")
# What pandas makes of a column of Python strs (pandas 3: its Arrow-backed "str"): read back as
# that already, a column needs no round trip through objects.
_STR = pd.DataFrame({"x": np.array(["x"], dtype=object)})["x"].dtype
HEADER = "header.json"
SUMS = "sums.json"  # {file name: SHA-256} of every other file of the entry
MAX_ENTRIES = 512  # entries kept (least recently used dropped on write)
MAX_BYTES = 8 << 30  # bytes kept (entries are ~1/4 of their trace's size)


def cache_root() -> Path:
    """Folder of the parse cache (created on first write)."""
    return cache_base() / "parsed"


@dataclass(frozen=True)
class FileKey:
    """What an entry must match: the file as it is now, the loader, the rank asked for."""

    path: str
    digest: str  # SHA-256 of the file's bytes (and its SQLite journals')
    rank: int | None
    version: str = CACHE_VERSION
    stat: tuple[int, ...] = ()  # the file's stat when hashed: a put after it changed stores nothing

    @classmethod
    def of(cls, path: Path, rank: int | None) -> FileKey:
        stat = stat_token(path)
        return cls(str(path.resolve()), file_digest(path), rank, stat=stat)

    def folder(self) -> Path:
        digest = hashlib.sha256(msgspec.json.encode(_key_dict(self))).hexdigest()[:24]
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(self.path).name)[:60]
        return cache_root() / f"{stem}-{digest}"


class _TraceHeader(msgspec.Struct):
    rank: int
    source: str
    fmt: str
    world_size: int | None
    rank_source: str
    hostname: str
    pid: int
    devices: dict[int, str]
    meta: dict[str, Any]
    notes: list[str]
    categoricals: dict[str, dict[str, list[str]]]  # table -> column -> categories
    names: list[str]


class _Sums(msgspec.Struct):
    files: dict[str, str]


class DamagedEntry(ValueError):
    """An entry whose files do not match their checksums (or are missing, or extra)."""


class _Header(msgspec.Struct):
    key: dict[str, Any]
    given_path: str
    traces: list[_TraceHeader]


def _key_dict(key: FileKey) -> dict[str, Any]:
    return {"path": key.path, "digest": key.digest, "rank": key.rank, "version": key.version}


def get(path: Path, rank: int | None, key: FileKey | None = None) -> list[RankTrace] | None:
    """The cached traces of this file, or None (miss, stale or unreadable: then removed)."""
    return lookup(path, rank, key)[0]


def lookup(path: Path, rank: int | None, key: FileKey | None = None) -> tuple[list[RankTrace] | None, str | None]:
    """(the cached traces or None, why a present entry was not used: None for a plain miss)."""
    try:
        key = key or FileKey.of(path, rank)
    except OSError:
        return None, None
    folder = key.folder()
    if not folder.is_dir():
        return None, None
    try:
        files = _verified_files(folder)
        header = msgspec.json.decode(files.pop(HEADER), type=_Header)
        if header.key != _key_dict(key):
            raise ValueError("entry made for another file state")
        traces = [_read_trace(files, i, th, header.given_path, path) for i, th in enumerate(header.traces)]
        touch(folder)
        return traces, None
    except DamagedEntry as exc:
        shutil.rmtree(folder, ignore_errors=True)
        return None, f"the parse cache's entry for this file was damaged ({exc}): the file was parsed again"
    except Exception:  # noqa: BLE001 - a bad entry is a miss, whatever is wrong with it
        shutil.rmtree(folder, ignore_errors=True)
        return None, "the parse cache's entry for this file could not be read: the file was parsed again"


def _verified_files(folder: Path) -> dict[str, bytes]:
    """Every file of an entry, read once, each matching its SHA-256 in sums.json (else DamagedEntry)."""
    try:
        sums = msgspec.json.decode((folder / SUMS).read_bytes(), type=_Sums).files
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        raise DamagedEntry("its checksums cannot be read") from None
    present = {p.name for p in folder.iterdir()} - {SUMS}
    if present != set(sums):
        raise DamagedEntry("files missing or added")
    out = {}
    for name, digest in sums.items():
        data = (folder / name).read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            raise DamagedEntry(f"{name} does not match its checksum")
        out[name] = data
    return out


def put(path: Path, rank: int | None, traces: list[RankTrace], key: FileKey | None = None) -> bool:
    """Store the traces of this file; False (and nothing written) when they cannot be stored, or the
    file changed since `key` was taken (its tables may be of either version)."""
    for t in traces:  # never cache a trace whose host tables stayed in its worker as if it had none
        require_host_tables(t)
    try:
        key = key or FileKey.of(path, rank)
        if stat_token(path) != key.stat:
            return False
        folder = key.folder()
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = folder.parent / f".{folder.name}.{uuid.uuid4().hex}.tmp"
        tmp.mkdir()
    except OSError:
        return False
    try:
        headers = [_write_trace(tmp, i, t) for i, t in enumerate(traces)]
        header = _Header(key=_key_dict(key), given_path=str(path), traces=headers)
        (tmp / HEADER).write_bytes(msgspec.json.encode(header))
        sums = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in tmp.iterdir()}
        (tmp / SUMS).write_bytes(msgspec.json.encode(_Sums(sums)))
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
        evict_oldest(cache_entries(folder.parent), MAX_ENTRIES, MAX_BYTES,
                     lambda old: shutil.rmtree(old, ignore_errors=True))
        return True
    except (OSError, TypeError, ValueError, pa.ArrowException, msgspec.EncodeError):
        shutil.rmtree(tmp, ignore_errors=True)
        return False


def _write_trace(folder: Path, i: int, t: RankTrace) -> _TraceHeader:
    cats: dict[str, dict[str, list[str]]] = {}
    for name in TABLES:
        df: pd.DataFrame = getattr(t, name)
        cats[name] = {c: [str(x) for x in dtype.categories] for c, dtype in df.dtypes.items()
                      if isinstance(dtype, pd.CategoricalDtype)}
        # one thread: the columns are small, and the pool's workers already fill the cores (Arrow's
        # default spreads them over its thread pool: twice the time in a busy worker)
        table = pa.Table.from_pandas(df, preserve_index=False, nthreads=1)
        ints = [f.name for f in table.schema if pa.types.is_integer(f.type)]
        pq.write_table(table, folder / f"{i}.{name}.parquet", compression="lz4", write_statistics=False,
                       use_dictionary=[f.name for f in table.schema if f.name not in ints],
                       column_encoding=dict.fromkeys(ints, "DELTA_BINARY_PACKED"))
    return _TraceHeader(rank=t.rank, source=t.source, fmt=t.fmt, world_size=t.world_size,
                        rank_source=t.rank_source, hostname=t.hostname, pid=t.pid, devices=dict(t.devices),
                        meta=dict(t.meta), notes=list(t.notes), categoricals=cats, names=list(t.names.names))


def _read_trace(files: dict[str, bytes], i: int, th: _TraceHeader, given_then: str, given_now: Path) -> RankTrace:
    tables = {}
    for name in TABLES:
        source = pa.BufferReader(files[f"{i}.{name}.parquet"])
        # one file: ParquetFile reads it without pq.read_table's dataset layer (pyarrow.dataset's import, ~50 ms
        # of a worker's start on a cache hit); the same table and schema
        df = pq.ParquetFile(source).read(use_threads=False).to_pandas(use_threads=False)
        for c in df.columns:
            if c in th.categoricals[name]:
                wanted = th.categoricals[name][c]
                if not isinstance(df[c].dtype, pd.CategoricalDtype):
                    df[c] = pd.Categorical(df[c].to_numpy(dtype=object), categories=wanted)
                elif list(df[c].cat.categories) != wanted:
                    df[c] = df[c].cat.set_categories(wanted)
            elif not pd.api.types.is_numeric_dtype(df[c].dtype) and (df.empty or df[c].dtype != _STR):
                df[c] = df[c].to_numpy(dtype=object)  # as the loaders build them: what pandas makes of str objects
        tables[name] = df
    source = str(given_now) if th.source == given_then else th.source
    return RankTrace(rank=th.rank, source=source, fmt=th.fmt, names=NameTable(th.names), world_size=th.world_size,
                     rank_source=th.rank_source, hostname=th.hostname, pid=th.pid, devices=dict(th.devices),
                     meta=dict(th.meta), notes=list(th.notes), **tables)


def info() -> CacheInfo:
    """Where the cache is, how many entries and bytes it holds (every file under it)."""
    return folder_info(cache_root(), whole_tree=True)


def clear() -> CacheInfo:
    """Remove every entry; returns what was there."""
    return clear_folder(cache_root(), whole_tree=True)
