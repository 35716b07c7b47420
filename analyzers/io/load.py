"""Input discovery and format dispatch: files, globs or directories -> one TraceSet.

The format is sniffed from the bytes, not the name. A directory is one run: its rank files
must agree on world size, carry distinct ranks and be of one format.
"""

from __future__ import annotations

import glob
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from analyzers.errors import BadInputError, MixedRunsError
from analyzers.io.kineto import load_kineto
from analyzers.timeline.classify import Rule, load_rules
from analyzers.timeline.model import RankTrace, TraceSet

TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".sqlite.gz", ".nsys-rep")
# Files the runners write beside a run's traces (runners/harness.py, runners/launch.py): a run
# folder is analyzed as it is, so directory search leaves these out.
RUN_METADATA = re.compile(r"^(?:manifest(?:\.failed)?|rank\d+\.(?:status|error)|.*\.partial)\.json$")
SQLITE_MAGIC = b"SQLite format 3\x00"

Progress = Callable[[str, int, int], None]  # (file, index, total)
PerRank = Callable[[RankTrace], Any]  # see analyzers.io.parallel


def sniff_format(path: Path) -> str:
    """'kineto' | 'nsys' | 'nsys-gz' | 'nsys-rep' from the first bytes; BadInputError otherwise."""
    try:
        with path.open("rb") as fh:
            head = fh.read(64)
    except IsADirectoryError:
        raise BadInputError(path, "is a directory") from None
    except OSError as exc:
        raise BadInputError(path, f"cannot read file ({exc.strerror or exc})") from None
    if not head:
        raise BadInputError(path, "empty file")
    if head.startswith(SQLITE_MAGIC):
        return "nsys"
    if head[:2] == b"\x1f\x8b":
        from analyzers.io.nsys_gz import is_gzipped_sqlite

        return "nsys-gz" if is_gzipped_sqlite(path) else "kineto"
    if head.lstrip()[:1] in (b"{", b"["):
        return "kineto"
    if path.suffix == ".nsys-rep" or b"nsys" in head.lower() or head[:4] == b"PK\x03\x04":
        return "nsys-rep"
    raise BadInputError(path, "not a trace: neither Kineto JSON (.json/.json.gz) nor an Nsight Systems "
                              "export (.sqlite/.nsys-rep)")


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
        text = str(raw)
        p = Path(text)
        if p.is_dir():
            _refuse_tree_of_runs(p)
            found = sorted(q for q in p.rglob("*") if q.is_file() and is_trace_name(q))
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
            matched = sorted(Path(m) for m in glob.glob(text, recursive=True) if Path(m).is_file())
            if not matched:
                raise BadInputError(text, "no file matches this pattern")
            out += matched
        else:
            raise BadInputError(p, "no such file or directory")
    seen: set[Path] = set()
    unique = []
    for p in out:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def _refuse_tree_of_runs(folder: Path) -> None:
    """A folder holding several runs (each sub-folder with its manifest.json) is not one run."""
    if (folder / "manifest.json").exists():
        return
    runs = sorted(m.parent for m in folder.rglob("manifest.json"))
    if len(runs) > 1:
        shown = ", ".join(str(r) for r in runs[:3]) + (", ..." if len(runs) > 3 else "")
        raise BadInputError(folder, f"holds {len(runs)} runs, not one; analyze one run folder ({shown}), "
                                    "or compare two with `overlapscope diff`")


def load_file(path: Path, rank: int | None = None) -> list[RankTrace]:
    """One file -> its rank traces (an nsys report may hold several processes).

    Anything a reader did not foresee in a malformed file still becomes a one-line
    BadInputError naming the file, never a traceback.
    """
    try:
        return _load_file(path, rank)
    except BadInputError:
        raise
    except (MemoryError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - a reader's surprise is still bad input
        raise BadInputError(path, f"cannot be read as a trace ({type(exc).__name__}: {exc})") from None


def _load_file(path: Path, rank: int | None) -> list[RankTrace]:
    fmt = sniff_format(path)
    if fmt == "kineto":
        return [load_kineto(path, rank)]
    from analyzers.io import nsys, nsys_rep  # the nsys reader needs sqlite-utils; imported only when used

    if fmt == "nsys-rep":
        path = nsys_rep.nsys_rep_to_sqlite(path)
    elif fmt == "nsys-gz":
        from analyzers.io.nsys_gz import gunzip_to_cache

        path = gunzip_to_cache(path)
    traces = nsys.load_nsys(path)
    if rank is not None and len(traces) == 1:
        traces[0].rank, traces[0].rank_source = rank, "given"
    return traces


def load_traces(
    inputs: Iterable[str | Path],
    *,
    rank: int | None = None,
    rules: list[Rule] | None = None,
    label: str = "",
    progress: Progress | None = None,
    jobs: int | None = 1,
    cache: bool = False,
    scheduler: str | None = None,
    per_rank: PerRank | None = None,
) -> TraceSet:
    """Load, validate and classify the traces of one run.

    jobs: worker processes (None: one per core); cache: use the parse cache; scheduler: run
    the per-rank stage on that Dask cluster instead. per_rank (analyzers.report.RankStage) is
    computed beside each rank's parse; its results land in meta for `analyze` to reuse.
    """
    from analyzers.io.parallel import PER_RANK_KEY, run_files

    paths = expand_paths(inputs)
    if rank is not None and len(paths) > 1:
        raise BadInputError(", ".join(map(str, paths)), "--rank applies to a single trace file")
    rules = rules if rules is not None else load_rules()
    if progress:
        progress(str(paths[0]) if paths else "", 0, len(paths))
    done = run_files(paths, rank, rules, load_file, per_rank, jobs=jobs, use_cache=cache, scheduler=scheduler,
                     progress=progress)
    if progress:
        progress("", len(paths), len(paths))
    ts = assemble([t for d in done for t in d.traces], label=label or _default_label(paths))
    results = {r: res for d in done for r, res in d.results.items()}
    if results:
        ts.meta[PER_RANK_KEY] = results
    return ts


def _default_label(paths: list[Path]) -> str:
    if not paths:
        return ""
    parents = {p.parent for p in paths}
    if len(paths) == 1:
        return paths[0].name
    return str(parents.pop()) if len(parents) == 1 else f"{len(paths)} files"


def assemble(traces: list[RankTrace], label: str = "") -> TraceSet:
    """Check the rank traces belong to one run and build the TraceSet."""
    if not traces:
        raise BadInputError(label or "input", "no rank traces found")
    fmts = {t.fmt for t in traces}
    if len(fmts) > 1:
        raise MixedRunsError(label, f"mixes trace formats ({', '.join(sorted(fmts))}); give one run at a time")
    worlds = {t.world_size for t in traces if t.world_size is not None}
    if len(worlds) > 1:
        sizes = {}
        for t in traces:
            sizes.setdefault(t.world_size, Path(t.source).name)
        detail = ", ".join(f"{w} in {name}" for w, name in sizes.items() if w is not None)
        raise MixedRunsError(label, f"files from different runs (world sizes differ: {detail})")
    by_rank: dict[int, RankTrace] = {}
    for t in traces:
        if t.rank in by_rank:
            other = by_rank[t.rank]
            if len(traces) > 1 and {t.rank_source, other.rank_source} <= {"default", "process order"}:
                raise MixedRunsError(label, "cannot tell the ranks apart (no distributedInfo and no rank in the "
                                            "file names); name files rank0.json, rank1.json, ...")
            raise MixedRunsError(label, f"rank {t.rank} appears twice ({other.source} and {t.source}): "
                                        "files from different runs?")
        by_rank[t.rank] = t
    world = worlds.pop() if worlds else None
    notes = []
    if world is not None and len(by_rank) < world:
        notes.append(f"{len(by_rank)} of {world} ranks given")
    return TraceSet(ranks=dict(sorted(by_rank.items())), label=label, fmt=fmts.pop(), world_size=world,
                    notes=notes)
