"""A trace file's bytes, as the JSON decoder reads them: mapped (a plain file), unpacked (gzip) or
read (what cannot be mapped), within the input limits."""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import BinaryIO

from analyzers.errors import BadInputError
from analyzers.io.input_limits import InputLimitError, check_file_size, gunzip_into

TraceBytes = bytes | bytearray | mmap.mmap


def read_bytes(path: Path) -> TraceBytes:
    """File contents, gunzipped (streaming, by magic, not by name) when gzip.

    In a pool worker a plain file is mapped, not read (_mapped): the decoder reads the page cache's own
    pages, so no copy is made and no fresh, zeroed memory is faulted in for it (8 ranks of 54 MB: -2.3 %
    wall, -2.5 % CPU, benchmarks/RESULTS.md). The calling process, and what cannot be mapped, reads,
    unbuffered: a buffered reader joins its buffered head to the rest, a second copy of the file."""
    try:
        with path.open("rb", buffering=0) as fh:
            st = os.fstat(fh.fileno())
            size = st.st_size
            if fh.read(2) != b"\x1f\x8b":
                check_file_size(size)
                if (mapped := _mapped(fh.fileno(), size, _sparse(st))) is not None:
                    return mapped
                fh.seek(0)
                return _read_text(fh)
            fh.seek(0)
            return gunzip_into(fh, size)  # bounded: a gzip bomb is refused, not unpacked
    except OSError as exc:
        raise BadInputError(path, f"cannot read file ({exc.strerror or exc})") from None
    except InputLimitError as exc:
        raise BadInputError(path, exc.problem) from None


_map_files = False  # set in pool workers (analyzers.io.parallel), whose death is named by their parent


def map_files_here() -> None:
    """Let this process map trace files. Only pool workers do: a file cut short under a mapping kills
    the process that reads it (SIGBUS), and only a worker has a parent left to say which file it was;
    the calling process (--jobs 1, one file) reads its files instead."""
    global _map_files
    _map_files = True


def _sparse(st: os.stat_result) -> bool:
    """Mostly holes (a file truncated up to a size, never written): its pages are not loaded ahead,
    so the decoder stops at the first hole (zero bytes are no JSON) having touched only what it read."""
    blocks = getattr(st, "st_blocks", None)
    return blocks is not None and st.st_size > (1 << 20) and blocks * 512 < st.st_size // 2


def _mapped(fd: int, size: int, sparse: bool = False) -> mmap.mmap | None:
    """The file read-only in memory, its pages mapped in one call (MAP_POPULATE, Linux); None where
    it cannot be (size 0: empty or not a regular file; no POSIX mmap; a file system that refuses).
    A file cut shorter by another program while mapped kills the worker reading it (SIGBUS); the
    per-rank stage then names that file (analyzers.errors.WorkerDiedError)."""
    if size <= 0 or os.name != "posix" or not _map_files:
        return None
    try:
        populate = 0 if sparse else getattr(mmap, "MAP_POPULATE", 0)
        return mmap.mmap(fd, size, flags=mmap.MAP_SHARED | populate, prot=mmap.PROT_READ)
    except (OSError, ValueError, OverflowError):  # OverflowError: past a 32-bit address space
        return None


READ_CHUNK = 1 << 20  # a growing bytearray is resized in place (mremap): peak ~1.1x the file, not 2x


def _read_text(fh: BinaryIO) -> bytearray:
    """The file read in chunks into one growing buffer, stopping after the first chunk that holds a zero
    byte: no JSON text holds one, so the decoder refuses it there, and a sparse 4 GB file (all holes
    past its head) costs one chunk, not 4 GB."""
    out = bytearray()
    while chunk := fh.read(READ_CHUNK):
        out += chunk
        if b"\x00" in chunk:
            break
    return out


def blank(data: TraceBytes) -> bool:
    """Empty or only whitespace (a slice of a mapped file is bytes; the head settles almost every file)."""
    return not data or (data[:4096].isspace() and bytes(data).isspace())
