"""Format dispatch and assembly: the files of one run (analyzers.io.discover) -> one TraceSet.

The format is sniffed from the bytes, not the name. A directory is one run: its rank files
must agree on world size, carry distinct ranks and be of one format.
"""

from __future__ import annotations

import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from analyzers.errors import BadInputError, MixedRunsError
from analyzers.io.discover import expand_paths
from analyzers.io.input_limits import ENV_MAX_FILES, InputLimitError, Limits, check_loaded_times, check_rank_meta
from analyzers.io.kineto import load_kineto
from analyzers.io.rank_select import format_ranks, missing_ranks_note, selection_notes
from analyzers.timeline.classify import Rule, load_rules
from analyzers.timeline.model import RankTrace, TraceSet

SQLITE_MAGIC = b"SQLite format 3\x00"

Progress = Callable[[str, int, int], None]  # (file, index, total)
PerRank = Callable[[RankTrace], Any]  # see analyzers.io.parallel


def sniff_format(path: Path) -> str:
    """'kineto' | 'nsys' | 'nsys-gz' | 'nsys-rep' from the first bytes; BadInputError otherwise."""
    try:
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise BadInputError(path, "is a directory")
        if not stat.S_ISREG(mode):  # a FIFO, socket or device would block or never end
            raise BadInputError(path, f"not a regular file ({_file_kind(mode)}): give the trace file itself")
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


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"))
    return next((name for test, name in kinds if test(mode)), "not a plain file")


def load_file(path: Path, rank: int | None = None) -> list[RankTrace]:
    """One file -> its rank traces (an nsys report may hold several processes).

    Anything a reader did not foresee in a malformed file still becomes a one-line
    BadInputError naming the file, never a traceback.
    """
    try:
        traces = _load_file(path, rank)
        for t in traces:
            check_rank_meta(t.rank, t.world_size, t.rank_source)
            check_loaded_times(t)
        return traces
    except BadInputError:
        raise
    except InputLimitError as exc:
        raise BadInputError(path, exc.problem) from None
    except RecursionError:
        raise BadInputError(path, "JSON nested too deeply to be a trace") from None
    except UnicodeDecodeError as exc:
        raise BadInputError(path, f"holds bytes that are not UTF-8 text ({exc.object[exc.start:exc.start + 4]!r}): "
                                  "not a trace a profiler wrote") from None
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
    require_gpu: bool = True,
    ranks: frozenset[int] | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> TraceSet:
    """Load, validate and classify the traces of one run.

    jobs: worker processes (None: one per core); cache: use the parse cache; scheduler: run
    the per-rank stage on that Dask cluster instead. per_rank (analyzers.report.RankStage) is
    computed beside each rank's parse; its results land in meta for `analyze` to reuse. A set in
    which no rank ran a GPU kernel has nothing to measure: refused, unless require_gpu is False (the
    runners' CPU correctness runs, whose traces are host-only). ranks: analyze only these ranks
    (analyzers.io.rank_select); the set's notes say which were asked for and not found. meanwhile: what
    the caller does while workers parse (parallel.run_files).
    """
    from analyzers.io.parallel import PER_RANK_KEY, run_files

    paths = expand_paths(inputs)
    if len(paths) > (most := Limits.from_env().max_files):
        raise BadInputError(label or _default_label(paths), f"{len(paths):,} trace files, over the {most:,} limit "
                                                            f"(set {ENV_MAX_FILES} to raise it)")
    if rank is not None and len(paths) > 1:
        raise BadInputError(", ".join(map(str, paths)), "--rank applies to a single trace file")
    rules = rules if rules is not None else load_rules()
    if progress:
        progress(str(paths[0]) if paths else "", 0, len(paths))
    done = run_files(paths, rank, rules, load_file, per_rank, jobs=jobs, use_cache=cache, scheduler=scheduler,
                     progress=progress, only=ranks, meanwhile=meanwhile)
    if progress:
        progress("", len(paths), len(paths))
    traces = [t for d in done for t in d.traces]
    if ranks is not None and not traces:
        raise BadInputError(label or _default_label(paths),
                            f"--ranks {format_ranks(ranks)}: no trace holds any of these ranks")
    if require_gpu and traces:
        _require_kernels(traces, str(paths[0]) if len(paths) == 1 else (label or ", ".join(map(str, paths))))
    ts = assemble(traces, label=label or _default_label(paths))
    if ranks is not None:
        ts.notes = [n for n in ts.notes if "ranks given" not in n] + selection_notes(ranks, ts.ranks, ts.world_size)
    results = {r: res for d in done for r, res in d.results.items()}
    if results:
        ts.meta[PER_RANK_KEY] = results
    return ts


def _require_kernels(traces: list[RankTrace], where: str) -> None:
    """Overlap is measured between kernels: a set in which no rank ran one has nothing to measure."""
    if any((t.gpu["kind"] == "kernel").any() for t in traces):
        return
    hint = "was CUDA profiling on? torch.profiler needs ProfilerActivity.CUDA, nsys needs --trace=cuda"
    if all(t.gpu.empty for t in traces):
        raise BadInputError(where, f"no GPU activity in any trace ({hint})")
    missing = next((n for t in traces for n in t.notes if n.startswith("no kernel table")), None)
    copies = sum(len(t.gpu) for t in traces)
    raise BadInputError(where, f"no GPU kernels in any trace, only {copies} memory copies/sets"
                               + (f" ({missing.split(':')[0]} in the export)" if missing else f" ({hint})"))


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
    notes = [n] if (n := missing_ranks_note(by_rank, world)) else []
    return TraceSet(ranks=dict(sorted(by_rank.items())), label=label, fmt=fmts.pop(), world_size=world,
                    notes=notes)
