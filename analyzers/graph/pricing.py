"""The graph's two answers for `analyze` side by side: the critical path and the findings' prices.

Once the unmodified replay is made (GraphRun), the critical path walk and each fix's replay read it
and nothing of each other, and by then the per-rank workers have finished: the cores they used are
free. Where the machine has two cores or more and can fork, the fixes' replays run in one forked
process (it inherits the GraphRun: nothing is pickled to it, a few figures per fix come back) while
the caller walks the critical path; the figures are those of the serial order (the same code on the
same inputs), and a failed child is redone here. Elsewhere both run here, one after the other; so
they do while another thread runs in this process (a progress display, a Dask client's loop): a
fork copies only the forking thread, and a lock another thread held at that moment stays held in
the child.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from analyzers.graph.analysis import GraphRun, critical_path_section, finding_savings
from analyzers.graph.fixes import FIX_OF_FINDING

_RUN: GraphRun | None = None  # the run a forked pricing process reads (set only while one runs)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _price_here(finding_ids: list[str]) -> tuple[dict[str, dict[str, Any]], bool]:
    """In the forked process: the savings, and whether a replay stopped at its round limit."""
    assert _RUN is not None
    return finding_savings(_RUN, finding_ids), _RUN.unsettled


def section_and_savings(run: GraphRun, finding_ids: list[str], parallel: bool | None = None
                        ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """critical_path_section(run) and finding_savings(run, finding_ids), as computed one after the other
    (the section's notes see only the replays made before it), the savings in a forked process where
    parallel (default: two cores or more and fork available, and a fix to replay)."""
    global _RUN
    fixes = {FIX_OF_FINDING[f] for f in finding_ids if f in FIX_OF_FINDING}
    if parallel is None:
        parallel = (bool(fixes) and _cores() > 1 and sys.platform.startswith("linux")
                    and threading.active_count() == 1)
    if not parallel:
        return critical_path_section(run), finding_savings(run, finding_ids)
    _RUN = run
    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork")) as pool:
            pending = pool.submit(_price_here, finding_ids)  # forks now: the child sees _RUN
            section = critical_path_section(run)
            try:
                savings, unsettled = pending.result()
            except Exception:  # a child that died or failed: the same work here
                savings, unsettled = finding_savings(run, finding_ids), run.unsettled
    finally:
        _RUN = None
    run.unsettled = run.unsettled or unsettled
    return section, savings
