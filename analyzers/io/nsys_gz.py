"""Gzipped Nsight Systems exports (`report.sqlite.gz`): unpacked once into the user cache.

SQLite needs a real file to open, and people compress exports before attaching or committing
them. The unpacked copy lives in the nsys cache with `.nsys-rep` exports (analyzers/io/nsys_cache.py:
keyed by the input's bytes, checked before reuse, never reused under --no-cache, shown and emptied by
`overlapscope cache`, bounded), with a sidecar naming the input so traces name the user's file.
The input is only ever read.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from analyzers.errors import BadInputError
from analyzers.io.atomic_write import private_path
from analyzers.io.input_limits import InputLimitError, gunzip_stream
from analyzers.io.nsys_cache import entry_paths, finish, reusable

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
    out, _ = entry_paths(path, "gunzip")
    if reusable(out):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    try:  # written in a private folder, moved into place with its checked sidecar when whole
        with private_path(out) as tmp:
            with path.open("rb") as src, tmp.open("xb") as dst:
                gunzip_stream(src, path.stat().st_size, dst)  # bounded: a gzip bomb is refused, not unpacked
            finish(out, tmp, {"source": str(path)})
    except InputLimitError as exc:
        raise BadInputError(path, f"gzipped SQLite export: {exc.problem}") from None
    except OSError as exc:
        raise BadInputError(path, f"gzipped SQLite export cannot be unpacked ({exc})") from None
    return out
