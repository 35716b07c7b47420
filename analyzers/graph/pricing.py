"""The graph's two answers for `analyze` side by side: the critical path and the findings' prices.

Once the unmodified replay is made (GraphRun), the rest is replays of fixes and walks of the replays.
A finding's fix and the removal the critical path's attribution replays to charge a cause are often
the same fix (host-syncs, launch-gaps, no-copies): each is replayed once (GraphRun.keep_replays).
Where the machine has two cores or more and can fork, the findings' fixes are replayed in one forked
process (it inherits the GraphRun: nothing is pickled to it; their replays come back) while the caller
walks every step's path and replays the removals that no finding's fix makes; the charge then reads
both. The figures are those of the serial order (the same code on the same inputs), and a failed child
is redone here. Elsewhere all runs here, one after the other; so it does while another thread runs in
this process (a progress display, a Dask client's loop): a fork copies only the forking thread, and a
lock another thread held at that moment stays held in the child.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from analyzers.graph.analysis import GraphRun, _same_inputs, critical_path_section, finding_savings
from analyzers.graph.attribution import (
    CAUSES,
    NO_PEER_WAIT,
    adopt_no_peer_wait,
    no_peer_wait_replay,
    prepare_removals,
)
from analyzers.graph.contention import contended_replay
from analyzers.graph.critical import ATTRIBUTION
from analyzers.graph.fixes import FIX_OF_FINDING, Fix, apply_fixes, reshared, unshared
from analyzers.graph.moves import MOVES
from analyzers.graph.replay import loop_order
from analyzers.graph.set_graph import SetGraph

_RUN: GraphRun | None = None  # the run a forked pricing process reads (set only while one runs)
_SG: SetGraph | None = None  # the graph a forked whatif process replays (set only while one runs)
Made = dict[tuple[Fix, ...], tuple[Any, Any, bool]]  # fixes -> (inputs, replay, unsettled)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _replay_here(fixes: list[Fix]) -> Made:
    """In the forked process: each fix's replay (GraphRun.run), to send back."""
    assert _RUN is not None
    _RUN.keep_replays({})
    for f in fixes:
        _RUN.run([f])
    kept = _RUN.__dict__["_replays"]
    return {(f,): (unshared(_RUN.sg, kept[(f,)][0]), *kept[(f,)][1:]) for f in fixes if (f,) in kept}


def _reshared(run: GraphRun, made: Made) -> Made:
    """made with the inputs' unchanged arrays shared with the caller's graph again (fixes.reshared)."""
    return {k: (reshared(run.sg, inp), rp, unsettled) for k, (inp, rp, unsettled) in made.items()}


def _removals_here(parts: list[str]) -> tuple[Made, tuple[Any, Any] | None]:
    """In the forked process: the removals of these cause parts (attribution.CAUSES), to send back."""
    assert _RUN is not None
    made = _replay_here([how for p in parts if isinstance(how := CAUSES[p][1], Fix)])
    return made, (no_peer_wait_replay(_RUN) if any(CAUSES[p][1] == NO_PEER_WAIT for p in parts) else None)


def _fixed_here(fixes: list[Fix]) -> tuple[Any, Any, bool]:
    """In the forked process: the fixes' contended replay on the graph it inherited (whatif_run)."""
    assert _SG is not None
    res = contended_replay(_SG, apply_fixes(_SG, fixes), loop_order(_SG))
    return unshared(_SG, res.inputs), res.replay, not res.converged


def _can_fork() -> bool:
    return _cores() > 1 and sys.platform.startswith("linux") and threading.active_count() == 1


def whatif_run(sg: SetGraph, fixes: list[Fix], parallel: bool | None = None) -> GraphRun:
    """GraphRun(sg) with the fixes' replay (one replay of them all, as GraphRun.run makes it) made beside its
    unmodified replay, in a forked process where parallel (default: as section_and_savings decides); the two
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
    """critical_path_section(run) and finding_savings(run, finding_ids), as computed one after the other
    (the section's notes see only the replays made before it), the findings' fixes replayed in a forked
    process where parallel (default: two cores or more and fork available, and a fix to replay)."""
    global _RUN
    fixes = _finding_fixes(finding_ids)
    if parallel is None:
        parallel = bool(fixes) and _can_fork()
    run.keep_replays({})
    try:
        if not parallel:
            section = critical_path_section(run)
        else:
            _RUN = run
            try:
                with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork")) as pool:
                    pending = pool.submit(_replay_here, fixes)  # forks now: the child sees _RUN
                    made: Made = {}

                    def before_charge(parts: set[str]) -> None:
                        # the removals no finding's fix makes: all but one to the child, after the fixes (the
                        # caller walks every step meanwhile and walks the removed paths after), one here
                        rest = [p for p in ATTRIBUTION if p in parts and CAUSES[p][1] not in fixes]
                        try:
                            more = pool.submit(_removals_here, rest[1:]) if len(rest) > 1 else None
                        except Exception:  # the child already died: all here, when read
                            more = None
                        prepare_removals(run, rest[:1])
                        try:
                            made.update(_reshared(run, pending.result()))
                            if more is not None:
                                got, no_joins = more.result()
                                made.update(_reshared(run, got))
                                if no_joins is not None:
                                    adopt_no_peer_wait(run, *no_joins)
                        except Exception:  # a child that died or failed: its replays are made here when read
                            pass
                        # a removal read from the child's replays marks its run unsettled on use (GraphRun.run)
                        run.keep_replays(made)

                    section = critical_path_section(run, before_charge)
            finally:
                _RUN = None
        savings = finding_savings(run, finding_ids)  # the kept replays mark the run unsettled as they are read
    finally:
        run.keep_replays(None)
    return section, savings

