"""Report cache: a finished analysis, kept for the same files, options and code.

Re-running `analyze` on unchanged traces (a CI gate read twice, a table after the JSON, the
same run opened again) should cost what reading the answer costs, not the analysis. An entry
is keyed by every input file's path as given (the report's label and sources spell it so), its resolved
path and the SHA-256 of its bytes (analyzers/io/content_key.py,
remembered per inode, size, mtime and ctime: a writer can restore a size and an mtime, not the bytes
or the ctime), the analysis settings the
command was given (steps, rules file contents, --comm-kernel, alignment, diagnosis...) and a
fingerprint of the code that made it (overlapscope's and analyzers' sources, the Python and
library versions), so a changed file, option or release never hits an old entry.

An entry is a folder with the report's JSON document (what `-f json` prints, and what the
gates read) and a header naming the key and the document's SHA-256; nothing is pickled (the
project's rule: no pickle where user data flows). It is written to a temporary folder and
renamed into place; anything that does not match on reading makes it a miss: it is removed and
rewritten, never trusted.

Light to import (no pandas): a hit answers `analyze` in any format (every format is drawn from the
document) without loading the analysis stack.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import uuid
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import msgspec

from analyzers.io.content_key import file_digest, stat_token
from analyzers.io.discover import expand_paths
from analyzers.io.environment import CacheInfo, cache_base, cache_entries, clear_folder, folder_info

FORMAT_VERSION = 1
MAX_ENTRIES = 64  # oldest entries beyond this are dropped on write
HEADER, DOC = "header.json", "report.json"
LIBRARIES = ("numpy", "pandas", "pyarrow", "msgspec", "sqlite-utils")


def cache_root() -> Path:
    return cache_base() / "reports"


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """SHA-256 over the sources of analyzers/ and overlapscope/ plus Python's and the libraries' versions."""
    h = hashlib.sha256(f"{FORMAT_VERSION}|{sys.version}".encode())
    versions = library_versions()
    for lib in LIBRARIES:
        h.update(f"|{lib}={versions[lib]}".encode())
    root = Path(__file__).resolve().parents[2]
    for package in ("analyzers", "overlapscope"):
        for f in sorted((root / package).rglob("*")):
            if f.suffix in (".py", ".toml") and f.is_file():
                h.update(str(f.relative_to(root)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()


def library_versions() -> dict[str, str]:
    """Each library's installed version, from its metadata folder's name (``numpy-2.1.0.dist-info``)
    on sys.path, first match winning as for imports; importlib.metadata only for what that misses
    (importing and asking it costs ~25 ms, a tenth of a cache hit)."""
    wanted = {_canonical(lib): lib for lib in LIBRARIES}
    found: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:  # a zip, or gone
            continue
        for name in names:
            if name.endswith(".dist-info"):
                project, _, version = name.removesuffix(".dist-info").partition("-")
                lib = wanted.get(_canonical(project))
                if lib and lib not in found and version:
                    found[lib] = version
    for lib in set(LIBRARIES) - set(found):
        import importlib.metadata

        try:
            found[lib] = importlib.metadata.version(lib)
        except importlib.metadata.PackageNotFoundError:
            found[lib] = "none"
    return found


def _canonical(project: str) -> str:
    """A project name as packaging compares them (PEP 503: case and -_. runs do not matter)."""
    return re.sub(r"[-_.]+", "-", project).lower()


@dataclass(frozen=True)
class ReportKey:
    """What an entry must match: the files as they are now, what was asked, the code that answered."""

    # (path as given, resolved path, SHA-256 of its bytes), in input order: the document names the files as
    # given (label, sources), so the same bytes named otherwise (relative, absolute, a link) are another entry
    files: tuple[tuple[str, str, str], ...]
    settings: str  # the command's analysis settings, canonical JSON
    code: str
    stats: tuple[tuple[int, ...], ...] = ()  # each file's stat when hashed (not part of the key)

    @classmethod
    def of(cls, inputs: list[str], settings: dict[str, Any]) -> ReportKey:
        """The key for these inputs (expanded as the loader expands them) and settings."""
        files, stats = [], []
        for p in expand_paths(inputs):
            try:
                stats.append(stat_token(p))
                files.append((str(p), str(p.resolve()), file_digest(p)))
            except OSError:  # gone or unreadable: the loader names the problem; this key matches nothing
                stats.append(())
                files.append((str(p), str(p), "unreadable"))
        return cls(tuple(files), msgspec.json.encode(dict(sorted(settings.items()))).decode(), code_fingerprint(),
                   tuple(stats))

    def still_current(self) -> bool:
        """Whether every file is as it was when the key was taken (an answer made while one changed is
        not stored: it may be of either version)."""
        try:
            return tuple(stat_token(Path(f)) for _, f, _ in self.files) == self.stats
        except OSError:
            return False

    def text(self) -> str:
        return msgspec.json.encode({"files": self.files, "settings": self.settings, "code": self.code}).decode()

    def folder(self) -> Path:
        return cache_root() / hashlib.sha256(self.text().encode()).hexdigest()[:32]


class _Header(msgspec.Struct):
    key: str
    doc_sha256: str


def get(key: ReportKey) -> bytes | None:
    """The entry for key if it is whole and matches; a damaged or foreign entry is removed (a miss)."""
    return lookup(key)[0]


def lookup(key: ReportKey) -> tuple[bytes | None, str | None]:
    """(the entry's document or None, why a present entry was not used: None for a plain miss)."""
    folder = key.folder()
    if not folder.is_dir():
        return None, None
    try:
        header = msgspec.json.decode((folder / HEADER).read_bytes(), type=_Header)
        doc = (folder / DOC).read_bytes()
        if header.key != key.text():
            raise ValueError("made for other files or options")
        if hashlib.sha256(doc).hexdigest() != header.doc_sha256:
            raise ValueError("its document does not match its checksum")
        os.utime(folder)  # recently used: kept when old entries are dropped
        return doc, None
    except Exception as exc:  # noqa: BLE001 - missing file, bad JSON, mismatch: all a miss
        shutil.rmtree(folder, ignore_errors=True)
        why = str(exc) if isinstance(exc, ValueError) and not isinstance(exc, msgspec.DecodeError) else "unreadable"
        return None, f"the report cache's entry was damaged ({why}): analyzed again"


def put(key: ReportKey, doc: bytes) -> None:
    """Store an entry (best effort: a cache that cannot be written never fails the command); nothing
    when a file changed since the key was taken."""
    if not key.still_current():
        return
    folder = key.folder()
    tmp = folder.parent / f".tmp-{uuid.uuid4().hex}"
    try:
        folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp.mkdir(mode=0o700)
        (tmp / DOC).write_bytes(doc)
        header = _Header(key.text(), hashlib.sha256(doc).hexdigest())
        (tmp / HEADER).write_bytes(msgspec.json.encode(header))
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
        _drop_oldest(folder.parent)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


def _drop_oldest(root: Path) -> None:
    entries = sorted(cache_entries(root), key=lambda p: p.stat().st_mtime_ns)
    for old in entries[:-MAX_ENTRIES]:
        shutil.rmtree(old, ignore_errors=True)


def info() -> CacheInfo:
    """Where the cache is, how many entries and bytes their files hold."""
    return folder_info(cache_root())


def clear() -> CacheInfo:
    """Remove every entry; what was removed."""
    return clear_folder(cache_root())
