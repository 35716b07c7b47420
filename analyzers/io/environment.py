"""What the environment configures: the cache folder and the Dask scheduler; plus the
housekeeping both caches (parse and report) share: counting and emptying their folders.

Light to import (no pandas), because `--help` and a report-cache hit must not pay for the
analysis stack.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from platformdirs import user_cache_dir

ENV_CACHE_DIR = "OVERLAPSCOPE_CACHE_DIR"
ENV_SCHEDULER = "OVERLAPSCOPE_SCHEDULER"
ENV_SCHEDULER_TIMEOUT = "OVERLAPSCOPE_SCHEDULER_TIMEOUT"
DEFAULT_SCHEDULER_TIMEOUT_S = 20.0


def cache_base() -> Path:
    """``$OVERLAPSCOPE_CACHE_DIR`` if set, else the platform's user cache folder for overlapscope."""
    override = os.environ.get(ENV_CACHE_DIR)
    return Path(override) if override else Path(user_cache_dir("overlapscope"))


@dataclass(frozen=True)
class CacheInfo:
    """What `overlapscope cache info` / `cache clear` print for one cache."""

    folder: Path
    entries: int
    bytes: int


def cache_entries(root: Path) -> list[Path]:
    """The entry folders of a cache; dot-named ones are writes in progress, not entries."""
    if not root.is_dir():
        return []
    return [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]


def folder_info(root: Path, *, whole_tree: bool = False) -> CacheInfo:
    """Entries and bytes of a cache folder: the entries' own files, or with ``whole_tree`` every
    file under the folder (writes in progress and strays included)."""
    entries = cache_entries(root)
    if whole_tree:
        size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) if root.is_dir() else 0
    else:
        size = sum(f.stat().st_size for e in entries for f in e.iterdir() if f.is_file())
    return CacheInfo(root, len(entries), size)


def clear_folder(root: Path, *, whole_tree: bool = False) -> CacheInfo:
    """Remove a cache folder and all it holds; returns what was there (counted as ``folder_info``)."""
    before = folder_info(root, whole_tree=whole_tree)
    shutil.rmtree(root, ignore_errors=True)
    return before


def evict_oldest(items: list[Path], max_entries: int, max_bytes: int, remove) -> None:
    """Drop the least recently used of `items` (by mtime: a hit touches its entry) until at most
    max_entries remain holding at most max_bytes (each item's size: its files, a folder's included);
    remove(item) deletes one. What vanished meanwhile (another process's eviction) is skipped."""
    sized = []
    for item in items:
        try:
            st = item.stat()
            size = sum(f.stat().st_size for f in item.iterdir()) if item.is_dir() else st.st_size
        except OSError:
            continue
        sized.append((st.st_mtime_ns, size, item))
    sized.sort(key=lambda x: x[0])
    total = sum(size for _, size, _ in sized)
    count = len(sized)
    for _, size, item in sized:
        if count <= max_entries and total <= max_bytes:
            break
        remove(item)
        count, total = count - 1, total - size


def touch(path: Path) -> None:
    """Mark an entry recently used (kept longest by evict_oldest); best effort."""
    try:
        os.utime(path)
    except OSError:
        pass


def scheduler_from_env(value: str | None) -> str | None:
    """--scheduler wins; else $OVERLAPSCOPE_SCHEDULER; empty means local."""
    return value or os.environ.get(ENV_SCHEDULER) or None


def scheduler_timeout_s() -> float:
    """Seconds to wait for the Dask scheduler to answer: $OVERLAPSCOPE_SCHEDULER_TIMEOUT, else 20.

    Dask retries a refused connection until this runs out, so an unreachable scheduler costs
    this long before its one-line error. Raises ValueError on a value that is not a positive number."""
    raw = os.environ.get(ENV_SCHEDULER_TIMEOUT, "").strip()
    if not raw:
        return DEFAULT_SCHEDULER_TIMEOUT_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"${ENV_SCHEDULER_TIMEOUT} must be a positive number of seconds, not {raw!r}")
    return seconds
