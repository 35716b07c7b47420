"""The opening runs' first load, started before the Streamlit stack is imported.

`overlapscope app` (app/serve.py) starts it first: the parse workers run while the server imports Streamlit
and Plotly and starts, not after. That load is the run's one pass through the parse workers: the per-rank part
of `overlapscope analyze` (metrics, syncs, findings, rank graphs), from which the Overview's first chart and the
whole analysis (app/ui.py) are both made, so nothing is parsed, classified or measured twice. Plain Python
(no streamlit): each load's result waits here until the cache entry that asks for the same files (app/ui.py)
takes it, once; a run that cannot be read keeps its error for the page that opens it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from analyzers.errors import BadInputError
from analyzers.timeline.model import TraceSet

from . import data

DEFAULT_SELECTED = 2  # sample variants selected at start (the timeline compares them); command-line runs: all
THREAD = "overlapscope-load"

_pending: dict[tuple[data.Fingerprint, str], Future[TraceSet]] = {}
_ended: dict[tuple[data.Fingerprint, str], threading.Event] = {}  # every load started here, set once it ends
_lock = threading.Lock()


def opening_sources(cli: list[str]) -> tuple[dict[str, data.Source], list[str]]:
    """Every source a new session offers (command-line paths, then the samples) and the keys it selects when
    no ?runs= link names others: the command-line runs, else the opening samples."""
    cli_sources = data.sources_from_paths(cli) if cli else []
    sources: dict[str, data.Source] = {}
    for s in cli_sources + data.discover_samples():
        sources.setdefault(s.key, s)
    sources = _unique_labels(sources)
    if cli_sources:  # every run given is selected: none is dropped for want of room
        return sources, list(dict.fromkeys(s.key for s in cli_sources))
    return sources, data.opening_samples([s for s in sources.values() if s.kind == "sample"], DEFAULT_SELECTED)


def _unique_labels(sources: dict[str, data.Source]) -> dict[str, data.Source]:
    """Two runs with one label (folders of one name under different parents) would share every chart's row and
    the ?runs= link: the later ones get their kind and a number."""
    seen: dict[str, int] = {}
    out = {}
    for key, src in sources.items():
        n = seen[src.label] = seen.get(src.label, 0) + 1
        out[key] = src if n == 1 else replace(src, label=f"{src.label} ({src.kind} {n})")
    return out


def opening_runs(paths: Sequence[str]) -> list[tuple[data.Source, data.Fingerprint]]:
    """The runs a new session opens on (the paths given, else the opening samples), with their fingerprints;
    one whose files cannot be listed is left to the page, which reports it."""
    sources, keys = opening_sources(data.command_line_paths(list(paths)))
    runs = []
    for key in keys:
        try:
            runs.append((sources[key], data.fingerprint(sources[key].paths)))
        except BadInputError:
            continue
    return runs


def start(runs: Sequence[tuple[data.Source, data.Fingerprint]], nice: int = 0) -> threading.Thread:
    """Load these runs (their per-rank stage), one run after the other, in a background thread whose CPU priority
    (and its parse workers') is lowered by nice."""
    todo = []
    with _lock:
        for src, fp in runs:
            if (fp, src.label) not in _pending:
                _pending[(fp, src.label)] = fut = Future()
                _ended[(fp, src.label)] = threading.Event()
                todo.append((fp, src.label, fut))
    thread = threading.Thread(target=niced, args=(nice, _load, todo), name=THREAD, daemon=True)
    thread.start()
    return thread


def niced(nice: int, fn: Callable[..., None], *args: Any) -> None:
    """fn(*args) in this thread at a CPU priority lowered by nice (where the system allows it): on Linux a
    nice value belongs to a thread, and a process it forks (a parse worker) starts with it."""
    if nice:
        with contextlib.suppress(OSError, AttributeError):
            os.nice(nice)
    fn(*args)


def _load(todo: list[tuple[data.Fingerprint, str, Future[TraceSet]]]) -> None:
    for fp, label, fut in todo:
        fut.set_running_or_notify_cancel()
        try:
            fut.set_result(data.load_analysis_set(fp, label))
        except BaseException as exc:  # noqa: BLE001 - kept for the page that opens the run, which reports it
            fut.set_exception(exc)
        _ended[(fp, label)].set()


def under_way(keys: Sequence[tuple[data.Fingerprint, str]]) -> bool:
    """Whether these runs' first loads were all started here and one of them has not ended yet."""
    with _lock:
        events = [_ended.get(k) for k in keys]
    return bool(events) and all(e is not None for e in events) and not all(e.is_set() for e in events)


def wait(keys: Sequence[tuple[data.Fingerprint, str]], timeout_s: float) -> bool:
    """Whether every one of these runs has a first load started here that ends within timeout_s (False at once
    for a run whose load was not started here: it is loaded where it is asked for)."""
    with _lock:
        events = [_ended.get(k) for k in keys]
    if not events or any(e is None for e in events):
        return False
    deadline = time.monotonic() + timeout_s
    return all(e.wait(max(0.0, deadline - time.monotonic())) for e in events)


def analysis_set(fp: data.Fingerprint, label: str) -> TraceSet:
    """The run with its per-rank results (data.load_analysis_set): the load started here if there is one
    (waiting for it to end), else a new one."""
    with _lock:
        fut = _pending.pop((fp, label), None)
    return fut.result() if fut is not None else data.load_analysis_set(fp, label)
