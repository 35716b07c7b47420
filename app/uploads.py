"""Uploaded traces on the server's disk: each batch in a fresh private folder, under names that cannot
collide, escape the folder or break the file system, and removed again (when the server exits, and when
older than UPLOAD_MAX_AGE_S as the next upload is saved). What an upload may be (type, size) is checked
here too; app/data.py holds the limits and the Source it becomes.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path

from .data import ENV_MAX_UPLOAD_MB, UPLOAD_SUFFIXES, Source, UploadRejected, max_upload_mb

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
UPLOAD_PREFIX = "overlapscope-upload-"
MAX_NAME_CHARS = 100  # of an uploaded file's stem on disk (file names stop at 255 bytes)
UPLOAD_MAX_AGE_S = 24 * 3600  # upload folders older than this are removed when the next upload is saved
_MADE_HERE: set[Path] = set()  # upload folders this server made: removed when it exits


def upload_name(name: str, used: set[str]) -> str:
    """The name an upload is saved under: its last path part, characters other than letters, digits and
    ._- replaced, the stem cut to MAX_NAME_CHARS, and a -2, -3 ... before the suffix where an earlier file of
    the batch has that name already ("x(1).json" and "x[1].json" are two files, never one replacing the
    other)."""
    raw = name.replace("\\", "/").rsplit("/", 1)[-1]
    safe = _SAFE.sub("_", raw).lstrip(".") or "trace.json"
    suffix = next((x for x in sorted(UPLOAD_SUFFIXES, key=len, reverse=True) if safe.lower().endswith(x)), "")
    stem = safe[: len(safe) - len(suffix)][:MAX_NAME_CHARS] or "trace"
    candidate, k = stem + suffix, 1
    while candidate.lower() in used:
        k += 1
        candidate = f"{stem}-{k}{suffix}"
    used.add(candidate.lower())
    return candidate


def save_uploads(files: Sequence[tuple[str, bytes]], dest_root: Path | None = None,
                 limit_mb: int | None = None) -> Source:
    """Check uploaded (name, bytes) pairs and write them to a fresh folder: one run.

    Refused with one clear line: no files, a name that is not .json/.json.gz/.sqlite, a file
    or a total over the size cap, an empty file. Names are sanitized (upload_name: no path parts, no
    control characters, bounded length, two files never saved as one). Upload folders older than
    UPLOAD_MAX_AGE_S are removed first, and those made here when the server exits.
    """
    limit_mb = limit_mb or max_upload_mb()
    if not files:
        raise UploadRejected("upload", "no files")
    cap = limit_mb * 1024 * 1024
    total = 0
    for name, content in files:
        shown = _shown_name(name)
        if not name.lower().endswith(UPLOAD_SUFFIXES):
            raise UploadRejected(shown, "not a trace file: upload .json, .json.gz (PyTorch profiler) or .sqlite "
                                        "(nsys export --type sqlite)")
        if len(content) == 0:
            raise UploadRejected(shown, "empty file")
        total += len(content)
        if len(content) > cap or total > cap:
            raise UploadRejected(shown, f"upload larger than the {limit_mb} MB limit "
                                        f"(set {ENV_MAX_UPLOAD_MB} to raise it)")
    remove_stale_uploads(dest_root)
    dest = Path(tempfile.mkdtemp(prefix=UPLOAD_PREFIX, dir=dest_root))
    _remember(dest)
    paths: list[Path] = []
    used: set[str] = set()
    for name, content in files:
        target = dest / upload_name(name, used)
        with open(target, "xb") as out:  # created here, never an existing file or link
            out.write(content)
        paths.append(target)
    label = paths[0].name if len(paths) == 1 else f"upload ({len(paths)} files)"
    names = ",".join(sorted(p.name for p in paths))
    return Source(key=f"upload:{dest.name}:{names}", label=label, kind="upload",
                  paths=tuple(str(p) for p in paths))


def _shown_name(name: str) -> str:
    """An uploaded name as an error line shows it: control characters written out, at most 80 characters."""
    from viz.safe_text import printable

    text = printable(name)
    return text if len(text) <= 80 else text[:77] + "..."


def discard_upload(source: Source) -> None:
    """Remove an upload's temporary folder (never anything that is not an upload)."""
    if source.kind != "upload" or not source.paths:
        return
    folder = Path(source.paths[0]).parent
    if folder.name.startswith(UPLOAD_PREFIX):
        shutil.rmtree(folder, ignore_errors=True)
        _MADE_HERE.discard(folder)


def remove_stale_uploads(root: Path | None = None, max_age_s: float = UPLOAD_MAX_AGE_S) -> list[Path]:
    """Remove upload folders under root (the system temporary folder by default) last changed over max_age_s
    ago; the folders removed."""
    import time

    base = Path(root) if root is not None else Path(tempfile.gettempdir())
    now, removed = time.time(), []
    try:
        found = list(base.glob(UPLOAD_PREFIX + "*"))
    except OSError:
        return []
    for folder in found:
        try:
            st = folder.lstat()
        except OSError:
            continue
        if folder.is_dir() and not folder.is_symlink() and st.st_uid == os.getuid() and now - st.st_mtime > max_age_s:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


class UploadGuard:
    """Kept in the session's state (app/sidebar.py): when Streamlit drops the session, the guard is freed and
    its upload's folder removed, so a server that runs for weeks does not keep every upload."""

    def __init__(self, source: Source) -> None:
        self._finalizer = weakref.finalize(self, discard_upload, source)


def _remember(folder: Path) -> None:
    """Remove folder when this process exits (the server's end: its uploads are no use to the next one)."""
    if not _MADE_HERE:
        import atexit

        atexit.register(_remove_made_here)
    _MADE_HERE.add(folder)


def _remove_made_here() -> None:
    for folder in list(_MADE_HERE):
        shutil.rmtree(folder, ignore_errors=True)
    _MADE_HERE.clear()
