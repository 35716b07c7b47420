"""Gzipped Nsight Systems exports (`report.sqlite.gz`): unpacked once into the user cache.

SQLite needs a real file to open, and people compress exports before attaching or committing
them. The unpacked copy lives in the same cache as `.nsys-rep` exports, keyed by the input's
resolved path, size and mtime, with a sidecar naming the input so traces name the user's file.
The input is only ever read.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

from analyzers.errors import BadInputError
from analyzers.io.atomic_write import atomic_path
from analyzers.io.input_limits import InputLimitError, gunzip_stream
from analyzers.io.nsys_rep import _cache_paths

SQLITE_MAGIC = b"SQLite format 3\x00"


def is_gzipped_sqlite(path: Path) -> bool:
    """True when the file is gzip whose unpacked bytes start like an SQLite database."""
    try:
        with gzip.open(path, "rb") as fh:
            return fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except (OSError, EOFError, zlib.error):
        return False


def gunzip_to_cache(path: Path) -> Path:
    """The unpacked export in the cache (reused while the input is unchanged)."""
    out, sidecar = _cache_paths(path)
    if out.is_file() and sidecar.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    try:  # written in a private folder, renamed into place when whole (atomic_write.py)
        with atomic_path(out) as tmp, path.open("rb") as src, tmp.open("xb") as dst:
            gunzip_stream(src, path.stat().st_size, dst)  # bounded: a gzip bomb is refused, not unpacked
    except InputLimitError as exc:
        raise BadInputError(path, f"gzipped SQLite export: {exc.problem}") from None
    except OSError as exc:
        raise BadInputError(path, f"gzipped SQLite export cannot be unpacked ({exc})") from None
    sidecar.write_text(json.dumps({"source": str(path)}))
    return out
