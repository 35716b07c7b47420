"""Which files a command's inputs name: files, globs and run folders -> trace files.

Light to import (no pandas): the report cache keys an analysis by these files before anything
is parsed, and `run` checks its output folder with is_trace_name.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable
from pathlib import Path

from analyzers.errors import BadInputError

MAX_DEPTH = 32  # folders below a given one: a run folder holds its ranks' files one or two levels down
MAX_ENTRIES = 1_000_000  # files and folders searched below a given folder
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".sqlite.gz", ".nsys-rep")
# Files the runners write beside a run's traces (runners/harness.py, runners/launch.py, the Execution
# Traces of runners/profiling.py, read by `whatif --et`): a run folder is analyzed as it is, so directory
# search leaves these out.
RUN_METADATA = re.compile(r"^(?:(?:manifest(?:\.failed)?|rank\d+\.(?:status|error)|.*\.partial)\.json"
                          r"|.*\.et\.json(?:\.gz)?)$")

JOURNALS = ("-wal", "-journal")  # SQLite's companions: what they hold is part of what the export reads


def file_stamp(path: Path) -> tuple[int, int]:
    """(size, mtime_ns) a cache keys a file by; an SQLite export's journal files count too (a WAL that
    gains commits changes what the export holds, not the export's own size or mtime)."""
    st = path.stat()
    size, mtime = st.st_size, st.st_mtime_ns
    for suffix in JOURNALS:
        try:
            js = path.with_name(path.name + suffix).stat()
        except OSError:
            continue
        size, mtime = size + js.st_size + 1, max(mtime, js.st_mtime_ns)
    return size, mtime


def is_trace_name(p: Path) -> bool:
    """A trace file by its name: a trace suffix, not hidden, not a run's manifest/status/error file."""
    return (any(p.name.endswith(s) for s in TRACE_SUFFIXES) and not p.name.startswith(".")
            and not RUN_METADATA.match(p.name))


def expand_paths(inputs: Iterable[str | Path]) -> list[Path]:
    """Files as given, globs expanded, directories searched (recursively) for trace files.

    In a directory, an .nsys-rep whose .sqlite export sits beside it is read from the export.
    """
    out: list[Path] = []
    for raw in inputs:
        try:
            out += _expand_one(str(raw))
        except OSError as exc:  # a name too long for the file system, a folder that cannot be searched
            raise BadInputError(raw, f"cannot be read ({_why(exc)})") from None
    return _unique(out)


def _expand_one(text: str) -> list[Path]:
    out: list[Path] = []
    p = Path(text)
    if p.is_dir():
        files = _walk(p)
        _refuse_tree_of_runs(p, files)
        found = sorted(q for q in files if is_trace_name(q))
        stems = {q.with_suffix("") for q in found if q.suffix == ".sqlite"}
        stems |= {q.with_suffix("").with_suffix("") for q in found if q.name.endswith(".sqlite.gz")}
        found = [q for q in found if not (q.suffix == ".nsys-rep" and q.with_suffix("") in stems)]
        if not found:
            raise BadInputError(p, "directory holds no trace files "
                                   "(.json, .json.gz, .sqlite, .sqlite.gz, .nsys-rep)")
        out += found
    elif p.exists():
        out.append(p)
    elif any(ch in text for ch in "*?["):
        try:
            matched = sorted(Path(m) for m in glob.glob(text, recursive=True) if Path(m).is_file())
        except (RecursionError, OSError) as exc:
            raise BadInputError(text, f"pattern cannot be expanded ({_why(exc)})") from None
        if not matched:
            raise BadInputError(text, "no file matches this pattern")
        out += matched
    elif p.is_symlink():
        raise BadInputError(p, "symbolic link to nothing (its target is missing, or links loop)")
    else:
        raise BadInputError(p, "no such file or directory")
    return out


def _unique(out: list[Path]) -> list[Path]:
    seen: set[Path] = set()
    unique = []
    for p in out:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def _why(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "folders nested too deeply"
    return getattr(exc, "strerror", None) or str(exc)


def _walk(folder: Path) -> list[Path]:
    """Every file under folder (links to files included, linked folders not followed), without
    recursion: at most MAX_DEPTH folders deep and MAX_ENTRIES entries, so that a folder nested
    1,000 deep or a whole file system is refused in bounded time, in one line."""
    out: list[Path] = []
    stack = [(folder, 0)]
    seen = 0
    while stack:
        here, depth = stack.pop()
        try:
            with os.scandir(here) as entries:
                for e in entries:
                    seen += 1
                    if seen > MAX_ENTRIES:
                        raise BadInputError(folder, f"holds more than {MAX_ENTRIES:,} files and folders: "
                                                    "give the run's folder itself")
                    if e.is_dir(follow_symlinks=False):
                        if depth + 1 > MAX_DEPTH:
                            raise BadInputError(folder, f"folders nested more than {MAX_DEPTH} deep: give the "
                                                        "run's folder itself")
                        stack.append((Path(e.path), depth + 1))
                    elif e.is_file():
                        out.append(Path(e.path))
        except OSError as exc:
            raise BadInputError(here, f"cannot list folder ({_why(exc)})") from None
    return out


def _refuse_tree_of_runs(folder: Path, files: list[Path]) -> None:
    """A folder holding several runs (each sub-folder with its manifest.json) is not one run."""
    if (folder / "manifest.json").exists():
        return
    runs = sorted(m.parent for m in files if m.name == "manifest.json")
    if len(runs) > 1:
        shown = ", ".join(str(r) for r in runs[:3]) + (", ..." if len(runs) > 3 else "")
        raise BadInputError(folder, f"holds {len(runs)} runs, not one; analyze one run folder ({shown}), "
                                    "or compare two with `overlapscope diff`")
