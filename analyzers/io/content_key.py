"""What the caches key a trace file by: the SHA-256 of its bytes (and of its SQLite journals).

Size and mtime are what a writer can put back (`touch -r`, `os.utime`): a trace changed in place to
the same size with its mtime restored was answered from the caches as the file it had been. Its
bytes cannot lie, so every cache (parse, report, unpacked and exported nsys) is keyed by them.

Hashing costs ~65 ms per 56 MB on this project's 2-core machine (hashlib's SHA-256 runs on the CPU's
SHA extensions: faster here than BLAKE2b, 140 ms, or MD5, 155 ms), beside ~1-2 s to parse the same
file. So that a report-cache hit does not pay it for every file every time, the digest is remembered
under what no writer can set back: the file's device, inode, size, mtime and ctime (the kernel sets
ctime to the current time on every write and on every utime call itself, so restoring an mtime moves
the ctime). A file whose ctime is under RACY_NS old is hashed again each time, never remembered: a
write in the same clock tick as the hash would leave its stat unchanged (git's "racy clean" case).

Light to import (no pandas): the report cache keys an analysis by this before anything is parsed.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path

from analyzers.io.discover import JOURNALS
from analyzers.io.environment import CacheInfo, cache_base, evict_oldest

RACY_NS = 2_000_000_000  # a ctime this recent may still share a clock tick with a write: hash, never remember
MEMO_FOLDER = "digests"
MAX_MEMOS = 4096  # remembered digests (80 bytes each), least recently written dropped first
_CHUNK = 1 << 20


def stat_token(path: Path) -> tuple[int, ...]:
    """(device, inode, size, mtime_ns, ctime_ns) of the file and of each SQLite journal beside it."""
    token: list[int] = []
    for p in (path, *(path.with_name(path.name + j) for j in JOURNALS)):
        try:
            st = p.stat()
        except OSError:
            if p is path:
                raise
            continue
        token += [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    return tuple(token)


def _hash_file(path: Path) -> str:
    h = hashlib.sha256()
    for p in (path, *(path.with_name(path.name + j) for j in JOURNALS)):
        try:
            fh = p.open("rb")
        except FileNotFoundError:
            if p is path:
                raise
            continue
        with fh:
            h.update(p.name.encode() + b"\0")
            for chunk in iter(lambda fh=fh: fh.read(_CHUNK), b""):
                h.update(chunk)
    return h.hexdigest()


def _memo_path(path: Path, token: tuple[int, ...]) -> Path:
    name = hashlib.sha256(f"{path.resolve()}\0{token}".encode()).hexdigest()[:40]
    return cache_base() / MEMO_FOLDER / name


def _seal(token: tuple[int, ...], digest: str) -> str:
    """The memo's text: the digest and a check over it and the stat it belongs to (a damaged memo is a miss)."""
    return digest + hashlib.sha256(f"{token}\0{digest}".encode()).hexdigest()[:16]


def file_digest(path: Path) -> str:
    """SHA-256 (hex) of the file's bytes and its journals'; remembered per stat, see the module docstring."""
    token = stat_token(path)
    if not stat.S_ISREG(path.stat().st_mode):  # a FIFO or a device: never opened here (a read could block);
        return "not-a-file:" + hashlib.sha256(repr(token).encode()).hexdigest()  # the loader refuses it
    memo = _memo_path(path, token)
    try:
        text = memo.read_text()
        if len(text) == 80 and text == _seal(token, text[:64]):
            return text[:64]
    except (OSError, UnicodeDecodeError):
        pass
    try:
        digest = _hash_file(path)
    except OSError:  # unreadable (permissions): a key that matches nothing stored; the loader names the problem
        return "unreadable:" + hashlib.sha256(repr(token).encode()).hexdigest()
    after = stat_token(path)
    newest_ctime = max(after[4::5])
    if after == token and time.time_ns() - newest_ctime >= RACY_NS:
        _remember(memo, token, digest)
    return digest


def _remember(memo: Path, token: tuple[int, ...], digest: str) -> None:
    """Best effort: a memo that cannot be written only costs the next run a hash."""
    try:
        memo.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = memo.with_name(f".{memo.name}.{os.getpid()}.tmp")
        tmp.write_text(_seal(token, digest))
        os.replace(tmp, memo)
        memos = [p for p in memo.parent.iterdir() if not p.name.startswith(".")]
        if len(memos) > MAX_MEMOS:
            evict_oldest(memos, MAX_MEMOS, 1 << 62, lambda old: old.unlink(missing_ok=True))
    except OSError:
        pass


def memo_root() -> Path:
    """The folder of remembered digests (emptied by `cache clear` with the caches)."""
    return cache_base() / MEMO_FOLDER


def info() -> CacheInfo:
    """Where the remembered digests are, how many, their bytes."""
    root = memo_root()
    files = [f for f in root.iterdir() if f.is_file()] if root.is_dir() else []
    return CacheInfo(root, len(files), sum(f.stat().st_size for f in files))


def clear() -> CacheInfo:
    """Forget every remembered digest (the next run hashes each file again); what was there."""
    import shutil

    before = info()
    shutil.rmtree(memo_root(), ignore_errors=True)
    return before
