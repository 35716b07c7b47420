"""The graph's two answers for `analyze` side by side: the critical path and the findings' prices.

Once the unmodified replay is made (GraphRun), the rest is replays of fixes and walks of the replays.
A finding's fix and the removal the critical path's attribution replays to charge a cause are often
the same fix (host-syncs, launch-gaps, no-copies): each is replayed once (GraphRun.keep_replays).
Where the machine has two cores or more and can fork, a process forked as soon as the set graph is built
(it inherits the graph: nothing is pickled to it; its replays come back) replays the findings' fixes while
the caller makes the unmodified replay and walks every step's path; the removals the charge needs that no
finding's fix makes are then shared between the two, each where it is expected to end first (_Share), and
the charge reads them all. The figures are those of the serial order (the same code on the same inputs),
and a failed child is redone here. Elsewhere all runs here, one after the other; so it does while another
thread runs in this process (a progress display, a Dask client's loop): a fork copies only the forking
thread, and a lock another thread held at that moment stays held in the child.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from analyzers.graph.analysis import GraphRun, _same_inputs, critical_path_section, finding_savings
from analyzers.graph.attribution import (
    CAUSES,
    NO_PEER_WAIT,
    adopt_no_peer_wait,
    prepare_removals,
    without_joins,
)
from analyzers.graph.contention import contended_replay, estimate
from analyzers.graph.critical import ATTRIBUTION
from analyzers.graph.fixes import FIX_OF_FINDING, Fix, apply_fixes, reshared, unshared
from analyzers.graph.moves import MOVES
from analyzers.graph.replay import loop_order
from analyzers.graph.residency import residency
from analyzers.graph.set_graph import SetGraph

_SG: SetGraph | None = None  # the graph a forked pricing or whatif process replays (set only while one runs)
Made = dict[tuple[Fix, ...], tuple[Any, Any, bool]]  # fixes -> (inputs, replay, unsettled)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _replay_here(fixes: list[Fix]) -> Made:
    """In the forked process: each fix's replay, as GraphRun.run makes it (none where the fix changes nothing in
    the graph: the caller's run answers those with its unmodified replay), to send back."""
    assert _SG is not None
    order = loop_order(_SG)
    unfixed = apply_fixes(_SG, [])
    out: Made = {}
    for f in fixes:
        inp = apply_fixes(_SG, [f])
        if not _same_inputs(inp, unfixed):
            res = contended_replay(_SG, inp, order)
            out[(f,)] = (unshared(_SG, res.inputs), res.replay, not res.converged)
    return out


def _reshared(run: GraphRun, made: Made) -> Made:
    """made with the inputs' unchanged arrays shared with the caller's graph again (fixes.reshared)."""
    return {k: (reshared(run.sg, inp), rp, unsettled) for k, (inp, rp, unsettled) in made.items()}


def _removals_here(parts: list[str]) -> tuple[Made, tuple[Any, Any] | None]:
    """In the forked process: the removals of these cause parts (attribution.CAUSES), to send back."""
    assert _SG is not None
    made = _replay_here([how for p in parts if isinstance(how := CAUSES[p][1], Fix)])
    if not any(CAUSES[p][1] == NO_PEER_WAIT for p in parts):
        return made, None
    res = contended_replay(without_joins(_SG), apply_fixes(_SG, []), loop_order(_SG))  # no_peer_wait_replay's
    return made, (res.inputs, res.replay)


def _fixed_here(fixes: list[Fix]) -> tuple[Any, Any, bool]:
    """In the forked process: the fixes' contended replay on the graph it inherited (whatif_run)."""
    assert _SG is not None
    res = contended_replay(_SG, apply_fixes(_SG, fixes), loop_order(_SG))
    return unshared(_SG, res.inputs), res.replay, not res.converged


def _can_fork() -> bool:
    return _cores() > 1 and sys.platform.startswith("linux") and threading.active_count() == 1


def whatif_run(sg: SetGraph, fixes: list[Fix], parallel: bool | None = None) -> GraphRun:
    """GraphRun(sg) with the fixes' replay (one replay of them all, as GraphRun.run makes it) made beside its
    unmodified replay, in a forked process where parallel (default: as priced_run decides); the two
    do not depend on each other. The run keeps that replay, so whatif(run, fixes) reads it; the figures are
    those of the serial order (the same code on the same inputs). Fixes that move work (graph.moves) read
    the unmodified replay: they run after it, here."""
    global _SG
    if parallel is None:
        parallel = bool(fixes) and _can_fork()
    if not parallel or any(f.name in MOVES for f in fixes):
        return GraphRun(sg)
    _SG = sg
    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork")) as pool:
            pending = pool.submit(_fixed_here, list(fixes))  # forks now: the child sees _SG
            run = GraphRun(sg)
            try:
                made = pending.result()
            except Exception:  # a child that died or failed: GraphRun.run replays the fixes here
                return run
    finally:
        _SG = None
    inp, rp, unsettled = made
    inp = reshared(sg, inp)
    if not _same_inputs(apply_fixes(sg, fixes), run.unfixed):  # else GraphRun.run answers with the base, as serially
        run.keep_replays({tuple(fixes): (inp, rp, unsettled)})
    return run


def _finding_fixes(finding_ids: list[str]) -> list[Fix]:
    names = dict.fromkeys(FIX_OF_FINDING[f] for f in finding_ids if f in FIX_OF_FINDING)
    return [Fix(n) for n in names]


def section_and_savings(run: GraphRun, finding_ids: list[str], parallel: bool | None = None
                        ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """critical_path_section(run) and finding_savings(run, finding_ids) of a run already made (priced_run)."""
    _, section, savings = priced_run(run.sg, finding_ids, parallel, run)
    return section, savings


def priced_run(sg: SetGraph, finding_ids: list[str], parallel: bool | None = None, run: GraphRun | None = None
               ) -> tuple[GraphRun, dict[str, Any], dict[str, dict[str, Any]]]:
    """GraphRun(sg) (or run, made already), critical_path_section(run) and finding_savings(run, finding_ids), as
    computed one after the other (the section's notes see only the replays made before it). Where parallel
    (default: two cores or more and fork available, and a fix to replay) the findings' fixes are replayed in a
    process forked before the unmodified replay, while this one makes that replay and walks every step's path;
    the removals the charge needs that no finding's fix makes are then shared between the two (_Share; their
    figures do not depend on where)."""
    global _SG
    fixes = _finding_fixes(finding_ids)
    if parallel is None:
        parallel = bool(fixes) and _can_fork()
    if not parallel:
        run = run if run is not None else GraphRun(sg)
        run.keep_replays({})
        try:
            section = critical_path_section(run)
            return run, section, finding_savings(run, finding_ids)
        finally:
            run.keep_replays(None)
    estimate(sg), residency(sg), loop_order(sg)  # what every replay reads, made once before the fork
    _SG = sg
    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork")) as pool:
            pending = [pool.submit(_replay_here, fixes)]  # forks now: the child sees _SG
            forked = time.perf_counter()
            made_here = run is None
            run = run if run is not None else GraphRun(sg)
            # a fix's or a removal's replay costs about two of the unmodified one (a round of SM gates)
            each = 2 * (time.perf_counter() - forked) if made_here else 0.0
            share = _Share(pool, pending, fixes, forked + each * len(fixes), each)
            run.keep_replays({})
            try:
                section = critical_path_section(run, lambda parts: share(run, parts))
                savings = finding_savings(run, finding_ids)  # kept replays mark the run unsettled as they are read
            finally:
                run.keep_replays(None)
    finally:
        _SG = None
    return run, section, savings


class _Share:
    """Before the charge: the removals of the walked parts that no finding's fix makes, each replayed where it
    is expected to end first (here, or in the forked process once its fixes are replayed: each replay taking
    `each` seconds), then every replay that process made kept on the run (a removal read from them marks the
    run unsettled on use, GraphRun.run)."""

    def __init__(self, pool: ProcessPoolExecutor, pending: list[Future], fixes: list[Fix], child_free: float,
                 each: float) -> None:
        self.pool, self.pending, self.fixes, self.child_free = pool, pending, fixes, child_free
        self.each = each or 1.0  # unknown (a run made elsewhere): alike, so the removals alternate, the first there

    def __call__(self, run: GraphRun, parts: set[str]) -> None:
        rest = [p for p in ATTRIBUTION if p in parts and CAUSES[p][1] not in self.fixes]
        here_at = time.perf_counter()
        there_at = here_at if self.pending[0].done() else max(self.child_free, here_at)
        mine, theirs = [], []
        for p in rest:  # to the child at a tie: the caller walks the removed paths once all are made
            if here_at < there_at:
                mine.append(p)
                here_at += self.each
            else:
                theirs.append(p)
                there_at += self.each
        if theirs:
            try:
                self.pending.append(self.pool.submit(_removals_here, theirs))
            except Exception:  # the child already died: all here
                mine += theirs
        prepare_removals(run, mine)
        made: Made = {}
        try:
            made.update(_reshared(run, self.pending[0].result()))
            if len(self.pending) > 1:
                got, no_joins = self.pending[1].result()
                made.update(_reshared(run, got))
                if no_joins is not None:
                    adopt_no_peer_wait(run, *no_joins)
        except Exception:  # a child that died or failed: its replays are made here when read
            pass
        run.keep_replays(made)
