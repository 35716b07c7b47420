"""Writing an output file whole or not at all, through a temporary name no one else can plant.

The new content is written inside a private folder made beside the target (tempfile.mkdtemp: created
exclusively, mode 0700, an unpredictable name), then renamed over the target: a reader never sees half a
file, a failed write leaves none, and no file or symbolic link planted under a guessable temporary name
is followed or overwritten (the rename replaces a link at the target itself, never what it points to).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

NAME_CHARS = 100  # of the target's name in the private folder's name (file names stop at 255 bytes)


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A path (with path's name and suffixes) to write to; moved over path when the block ends without an
    exception, removed with its folder in every case."""
    folder = Path(tempfile.mkdtemp(prefix=f".{path.name[:NAME_CHARS]}.", suffix=".partial", dir=path.parent))
    try:
        tmp = folder / path.name
        yield tmp
        os.replace(tmp, path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def private_path(path: Path) -> Iterator[Path]:
    """A path (with path's name) in a private folder beside path, for a writer that moves the file into place
    itself (analyzers/io/nsys_cache.finish); the folder and whatever is left in it are removed in every case."""
    folder = Path(tempfile.mkdtemp(prefix=f".{path.name[:NAME_CHARS]}.", suffix=".partial", dir=path.parent))
    try:
        yield folder / path.name
    finally:
        shutil.rmtree(folder, ignore_errors=True)
