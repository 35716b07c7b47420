"""Pool workers keep the memory they free for the next file, instead of giving it back to the OS.

glibc gives every large block (128 KiB and up: a gzip file's unpacked bytes, numpy columns; a
plain file is mapped instead, analyzers/io/trace_bytes.py) its own mapping and unmaps it when
freed, and trims the top of the heap; a worker that reads file after file then page-faults its
way through tens of MB of fresh, zeroed pages per file. Raising both thresholds lets the next
file reuse what the last one freed (measured on 54 MB Kineto ranks, 7 loads in one process:
28.5k -> 13.5k minor faults and 0.30 -> 0.27 s CPU per file, peak RSS +50 MB). Only pool workers
do this (analyzers.io.parallel): they exit with the pool, so no long-lived process (the app, a
--jobs 1 run) holds freed memory.

Python's own small-object allocator (pymalloc) is the other half: it returns a 1 MiB arena
to the OS as soon as its last object dies, so each file's decoded events (tens of MB of
structs, strings and ints) fault in fresh arenas and unmap them again. ``hold_arenas`` keeps a
sparse sample of the last file's decoded objects alive in a pool worker, which keeps their
arenas mapped for the next file to fill (measured on 54 MB Kineto ranks, one process, files
after the first: ~15k -> ~0 minor faults and 73 -> 50 ms per decode, 19 -> 13 ms to free).

A worker's last file is not freed object by object at all (``last_file_follows``): the worker
exits after it and the OS takes the memory back at once, as the CLI process itself does
(overlapscope/cli.py: exit_after_command). That is 15-20 ms less before the last results of an
8-rank set reach the cross-rank stage (-2 % wall, benchmarks/RESULTS.md).
"""

from __future__ import annotations

import ctypes
from typing import Any

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
KEEP_BYTES = 1 << 30  # freed memory kept for reuse, at most
OWN_MAPPING_BYTES = 1 << 29  # blocks above this still get their own mapping (a 500 MB rank's bytes)
# One object in this many keeps its arena: a decoded event with its fields is a few hundred bytes,
# so a 1 MiB arena holds thousands and a stride of 256 leaves several live objects in each.
HOLD_STRIDE = 256

_held: list[Any] = []  # the sample hold_arenas keeps (pool workers only)
_holding = False
_hold_everything = False  # the worker's last file: its decoded objects are left for the exit


def keep_freed_memory() -> bool:
    """Tune this process's allocators for file-after-file work (hold_arenas on); False where the C
    library is not glibc."""
    global _holding
    _holding = True
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no C library to ask, or not glibc (macOS, musl)
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, OWN_MAPPING_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, KEEP_BYTES))


def hold_arenas(decoded: list[Any]) -> None:
    """Keep every HOLD_STRIDE-th decoded object alive until the next file's are decoded, so pymalloc
    keeps their arenas for it (every object, after last_file_follows). A no-op outside processes that
    called keep_freed_memory."""
    if _holding:
        _held[:] = decoded if _hold_everything else decoded[::HOLD_STRIDE]


def last_file_follows() -> None:
    """This pool worker will most likely read no file after the next one (the pool hands out files in
    order, and the next is among the last, one per worker): hold all of its decoded objects, so that
    they are never freed one by one. Should another file come after all, holding it replaces them:
    at most one file's decode is held, as before."""
    global _hold_everything
    _hold_everything = _holding
