"""The nsys cache: SQLite made from a user's file (a `.nsys-rep` exported by nsys, a `.sqlite.gz`
unpacked), kept in the user cache so the next parse of the same file skips the export.

An entry is ``<name>-<key>.sqlite`` with a sidecar ``<name>-<key>.json``. The key is the input's
resolved path, the SHA-256 of its bytes (analyzers/io/content_key.py) and how it was made, so a file
changed in place, whatever its size and mtime say, makes a new entry. The sidecar names the input
(traces name the user's file, not the cache) and holds the SHA-256 of the SQLite file and a check
over itself: an entry is reused only when both match, else it is made again. `--no-cache` never
reuses an entry (reuse_entries), `overlapscope cache info` / `cache clear` show and empty the folder,
and it keeps at most MAX_ENTRIES entries and MAX_BYTES bytes, the least recently used dropped first.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from analyzers.io.content_key import file_digest
from analyzers.io.environment import CacheInfo, cache_base, evict_oldest, touch

MAX_ENTRIES = 64
MAX_BYTES = 32 << 30  # exports are large (an 8-rank run's is GBs); the least recently used go first
_CHUNK = 1 << 20
_reuse = True  # off while a --no-cache load runs (reuse_entries)


def cache_dir() -> Path:
    """Where exports of .nsys-rep reports and unpacked .sqlite.gz exports are kept: the cache folder
    ($OVERLAPSCOPE_CACHE_DIR or the user cache dir), never beside the input."""
    return cache_base() / "nsys"


@contextmanager
def reuse_entries(allowed: bool) -> Iterator[None]:
    """With allowed False (--no-cache), every entry asked for inside is made again from the input."""
    global _reuse
    before, _reuse = _reuse, allowed
    try:
        yield
    finally:
        _reuse = before


def entry_paths(path: Path, how: str) -> tuple[Path, Path]:
    """(SQLite, sidecar) in the cache for this input's bytes, made `how` (the export's flags)."""
    key = hashlib.sha256(f"{path.resolve()}\0{file_digest(path)}\0{how}".encode()).hexdigest()[:24]
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", path.name)[:60]
    base = cache_dir() / f"{stem}-{key}"
    return base.with_name(base.name + ".sqlite"), base.with_name(base.name + ".json")


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _seal(meta: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()


def read_sidecar(sqlite_path: Path) -> dict[str, Any] | None:
    """The sidecar of a cached SQLite file, when it is whole (its check matches); None otherwise."""
    try:
        side = json.loads(sqlite_path.with_suffix(".json").read_text())
        meta = side["meta"]
        if not isinstance(meta, dict) or side.get("check") != _seal(meta):
            return None
        return meta
    except (OSError, ValueError, KeyError, TypeError):
        return None


def reusable(out: Path) -> bool:
    """Whether the entry may be used: reuse allowed, and the SQLite file matches its sidecar's SHA-256."""
    if not _reuse or not out.is_file():
        return False
    meta = read_sidecar(out)
    try:
        if meta is None or meta.get("sqlite_sha256") != _file_sha256(out):
            return False
    except OSError:
        return False
    touch(out)
    return True


def finish(out: Path, tmp: Path, meta: dict[str, Any]) -> None:
    """Move a made SQLite file into place with its sidecar, then keep the folder within its bounds."""
    meta = {**meta, "sqlite_sha256": _file_sha256(tmp)}
    side_tmp = tmp.with_name(tmp.name + ".json.tmp")  # beside tmp: in its private folder (atomic_write)
    side_tmp.write_text(json.dumps({"meta": meta, "check": _seal(meta)}))
    os.replace(tmp, out)
    os.replace(side_tmp, out.with_suffix(".json"))
    evict_oldest(_entries(), MAX_ENTRIES, MAX_BYTES, _remove)


def _entries() -> list[Path]:
    root = cache_dir()
    if not root.is_dir():
        return []
    return [p for p in root.iterdir()
            if p.suffix == ".sqlite" and not p.name.startswith(".") and ".part-" not in p.name]


def _remove(sqlite_path: Path) -> None:
    sqlite_path.unlink(missing_ok=True)
    sqlite_path.with_suffix(".json").unlink(missing_ok=True)


def in_cache(sqlite_path: Path) -> bool:
    try:
        return sqlite_path.resolve().parent == cache_dir().resolve()
    except OSError:
        return False


def info() -> CacheInfo:
    """Where the folder is, how many exports it holds, the bytes of every file in it."""
    root = cache_dir()
    size = sum(f.stat().st_size for f in root.iterdir() if f.is_file()) if root.is_dir() else 0
    return CacheInfo(root, len(_entries()), size)


def clear() -> CacheInfo:
    """Remove every export (and anything else in the folder); what was there."""
    before = info()
    shutil.rmtree(cache_dir(), ignore_errors=True)
    return before
