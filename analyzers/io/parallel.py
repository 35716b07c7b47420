"""The per-rank stage, run on many cores or on a Dask cluster.

One task per trace file: parse it (or read it from the parse cache), classify its kernels,
and compute what depends on that rank alone through the caller's per-rank callable
(analyzers.report.RankStage: metrics, blocking syncs, per-rank findings). Only those
compact tables and results travel back, so the parent's memory grows with the tables, not
with the JSON, and a worker holds one file's decode at a time. The cross-rank stage then
runs on the caller (analyzers.report.analyze), which reuses the per-rank results.

Executors: in-process (jobs=1), a local process pool (jobs>1, default: one per core), or
an existing dask.distributed cluster (scheduler address; workers must see the same paths).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analyzers.errors import BadInputError, WorkerDiedError
from analyzers.io.environment import scheduler_timeout_s
from analyzers.io.nsys_cache import reuse_entries
from analyzers.io.rank_select import skip_file
from analyzers.io.trace_bytes import map_files_here
from analyzers.io.worker_exit import die_with_parent
from analyzers.io.worker_memory import keep_freed_memory, last_file_follows
from analyzers.timeline.classify import Rule, classify_trace
from analyzers.timeline.graphs import mark_graph_launches
from analyzers.timeline.model import RankTrace

PER_RANK_KEY = "per_rank_results"  # TraceSet.meta key holding {rank: RankResults}

Progress = Callable[[str, int, int], None]
# What the caller computes per rank beside the parse (a picklable callable; analyzers.report.RankStage).
# Its optional method shipped(trace) -> RankTrace says what of the trace goes back to the caller; its
# optional method collector() gives what the caller runs on each file's results as they arrive (to keep
# less of them as they come).
PerRank = Callable[[RankTrace], Any]
# Reads one file into its rank traces (analyzers.io.load.load_file; passed in, so that the loader,
# which calls this module, is not imported by it).
Loader = Callable[[Path, "int | None"], list[RankTrace]]


def default_jobs() -> int:
    """One worker per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@dataclass
class FileResult:
    path: str
    traces: list[RankTrace]
    results: dict[int, Any] = field(default_factory=dict)  # rank -> what per_rank returned


def run_rank_stage(path: str, rank: int | None, rules: tuple[Rule, ...], per_rank: PerRank | None,
                   use_cache: bool, loader: Loader, only: frozenset[int] | None = None) -> FileResult:
    """One file through the per-rank stage (runs in a worker process, or in-process); with `only`,
    the ranks outside that selection are dropped (their files skipped unparsed where the head says)."""
    p = Path(path)
    if skip_file(p, only):
        return FileResult(path, [])
    with reuse_entries(use_cache):  # --no-cache: no unpacked or exported nsys file reused either
        traces = _load_cached(p, rank, loader) if use_cache else loader(p, rank)
    if only is not None:
        traces = [t for t in traces if t.rank in only]
    out = FileResult(path, traces)
    for t in traces:
        classify_trace(t, list(rules))
        mark_graph_launches(t)  # while the host tables are here (they may stay in the worker)
    if per_rank is not None:
        for t in traces:
            out.results[t.rank] = per_rank(t)
        if (shipped := getattr(per_rank, "shipped", None)) is not None:
            out.traces = [shipped(t) for t in traces]
    return out


def _load_cached(path: Path, rank: int | None, loader: Loader) -> list[RankTrace]:
    from analyzers.io import parse_cache

    try:
        key = parse_cache.FileKey.of(path, rank)
    except OSError:  # unreadable: the loader names the problem
        return loader(path, rank)
    hit, problem = parse_cache.lookup(path, rank, key)
    if hit is not None:
        return hit
    traces = loader(path, rank)
    parse_cache.put(path, rank, traces, key)
    for t in traces if problem else ():  # this run's answer says so; the rewritten entry does not
        t.notes.append(problem)
    return traces


def _pool_context() -> multiprocessing.context.BaseContext:
    """fork where it exists: workers start in milliseconds with the parent's imports."""
    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def run_files(paths: list[Path], rank: int | None, rules: list[Rule], loader: Loader,
              per_rank: PerRank | None = None, *, jobs: int | None = None, use_cache: bool = False,
              scheduler: str | None = None, progress: Progress | None = None,
              only: frozenset[int] | None = None, meanwhile: Callable[[], None] | None = None) -> list[FileResult]:
    """The per-rank stage over every file, in input order, on the chosen executor (only: a rank selection).
    meanwhile: what the caller does while the files are parsed elsewhere (pool or Dask), once they are
    handed out; run first where the caller parses them itself."""
    jobs = default_jobs() if jobs is None or jobs < 1 else jobs
    total = len(paths)
    results: dict[int, FileResult] = {}
    collect = getattr(per_rank, "collector", None)
    sink = collect() if collect is not None else None
    stage = (tuple(rules), per_rank, use_cache, loader, only)
    for i, res in _execute(paths, rank, stage, jobs, scheduler, meanwhile or _nothing):
        results[i] = res
        if sink is not None:
            sink(res.results)
        if progress:
            progress(res.path, len(results), total)
    return [results[i] for i in range(total)]


def _nothing() -> None:
    return None


def _execute(paths: list[Path], rank: int | None, stage: tuple[Any, ...], jobs: int,
             scheduler: str | None, meanwhile: Callable[[], None]) -> Iterator[tuple[int, FileResult]]:
    args = [(str(p), rank, *stage) for p in paths]
    if scheduler:
        yield from _execute_dask(args, scheduler, meanwhile)
        return
    workers = 1 if jobs == 1 or len(paths) == 1 else _workers_that_fit(min(jobs, len(paths)))
    if workers == 1:
        meanwhile()
        for i, a in enumerate(args):
            yield i, run_rank_stage(*a)
    else:
        context = _pool_context()
        progress = context.RawArray("b", len(args))  # per file: NOT_STARTED, STARTED or FINISHED
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=context,
                                   initializer=_start_worker, initargs=(progress, workers, os.getpid()))
        futures = {pool.submit(_tracked_rank_stage, i, *a): i for i, a in enumerate(args)}
        try:
            meanwhile()  # the workers are forked (at the first submit) and parsing
            for fut in as_completed(futures):
                yield futures[fut], fut.result()
        except BrokenProcessPool:
            pool.shutdown(wait=True)
            raise WorkerDiedError(_unfinished(paths, progress)) from None
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        # Every result is in: the workers exit (the OS unmapping their last file's memory) while the
        # caller goes on to the cross-rank stage, instead of the caller waiting for them.
        pool.shutdown(wait=False)


def _workers_that_fit(wanted: int) -> int:
    """As many workers as the open-file limit leaves room for (a pool holds ~10 descriptors, plus 2 per
    worker; a few stay free for the files read): past it the pool fails part-way (EMFILE) or hangs."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        open_now = len(os.listdir("/proc/self/fd"))
    except (ImportError, OSError, ValueError):  # not Linux: nothing to measure by
        return wanted
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, (soft - open_now - 16) // 2))


NOT_STARTED, STARTED, FINISHED = 0, 1, 2
_file_progress: Any = None  # in a pool worker: the pool's shared per-file progress array
_pool_workers = 1  # in a pool worker: how many workers its pool has


def _start_worker(progress: Any, workers: int, parent_pid: int) -> None:
    """Pool worker set-up: it dies with the parent (a kill -9 of the command leaves no worker behind), its
    allocators tuned for file-after-file work, the progress array kept."""
    global _file_progress, _pool_workers
    die_with_parent(parent_pid)
    _file_progress, _pool_workers = progress, workers
    keep_freed_memory()
    map_files_here()  # a worker killed by a file cut short under its mapping is named (WorkerDiedError)


def _tracked_rank_stage(index: int, *args: Any) -> FileResult:
    """run_rank_stage, marking file `index` started and finished in the shared progress array, so
    that the parent can name the file a killed worker was reading."""
    _file_progress[index] = STARTED
    if index >= len(_file_progress) - _pool_workers:  # one of the last files: this worker's last, most likely
        last_file_follows()
    result = run_rank_stage(*args)
    _file_progress[index] = FINISHED
    return result


def _unfinished(paths: list[Path], progress: Any) -> str:
    """The files being read when the pool broke (else every file without a result)."""
    states = list(progress)
    started = [str(p) for p, s in zip(paths, states, strict=True) if s == STARTED]
    return ", ".join(started or [str(p) for p, s in zip(paths, states, strict=True) if s != FINISHED])


def _execute_dask(args: list[tuple[Any, ...]], scheduler: str,
                  meanwhile: Callable[[], None]) -> Iterator[tuple[int, FileResult]]:
    """Each file a task on an existing dask.distributed cluster; results gathered here."""
    from distributed import Client
    from distributed import as_completed as dask_completed

    try:
        timeout_s = scheduler_timeout_s()
    except ValueError as exc:
        raise BadInputError(scheduler, str(exc)) from None
    try:
        client = Client(scheduler, timeout=timeout_s, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise BadInputError(scheduler, f"cannot reach the Dask scheduler ({exc})") from None
    try:
        futures = [client.submit(run_rank_stage, *a, pure=False) for a in args]
        index = {f.key: i for i, f in enumerate(futures)}
        pending = dask_completed(futures, loop=client.loop)
        del futures
        meanwhile()  # each result is released once fetched: a worker holds only those not yet gathered
        for fut in pending:
            i, res = index[fut.key], fut.result()
            fut.release()
            del fut
            yield i, res
    finally:
        client.close()
