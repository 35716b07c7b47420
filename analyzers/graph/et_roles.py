"""Data dependencies from an Execution Trace (analyzers/io/exec_trace.py), laid onto one rank's GPU rows.

The Execution Trace names ops as (name, k), the k-th op of that name in the process; the Kineto trace's host
ops of one name, in start order (an op before the ones nested in it), are numbered the same way: over the
whole trace where the Execution Trace recorded the same steps, else within each step where it recorded one
step of the same program (the runners record it on a step of its own: the observer slows the host), each
step whose op counts differ from the Execution Trace's being left out (the note counts them). A process id
that differs is refused (another rank's, or another run's, Execution Trace). Each GPU activity whose
launching call sits in a matched op (same thread) takes that op's part: the collective's communication
kernels, its producer's activities (copy-in), its copy-outs' and its consumer's compute. For the
collectives the Execution Trace ties to a consumer, these roles replace the ones the CPU op tree's ranges
gave (graph.dataflow): the tensors an op read and wrote say more than the range it was launched in. Each
all-gather (in each step) is a module of its own, ``et:NAME#k``, so the moves (graph.prefetch) can say
which source each consumer came from.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analyzers.errors import BadInputError
from analyzers.graph.dataflow import COPY_OUT, FORWARD, GATHER
from analyzers.io.exec_trace import ExecTrace
from analyzers.timeline.constants import NO_TIME

ET_MODULE_PREFIX = "et:"


def _numbered(ops: pd.DataFrame, names: Sequence[str], wanted: set[str]) -> dict[str, np.ndarray]:
    """Per wanted name: its host ops in start order (outer before inner), as an (n, 3) array of start, end, tid."""
    if not len(ops):
        return {}
    ids = ops["name_id"].to_numpy(np.int64)
    out = {}
    for i in np.unique(ids).tolist():
        if str(names[i]) not in wanted:
            continue
        rows = ops[ids == i]
        a = rows[["start_ns", "end_ns", "tid"]].to_numpy(np.int64)
        out[str(names[i])] = a[np.lexsort((-a[:, 1], a[:, 0]))]
    return out


def _windows(et: ExecTrace, by_name: dict[str, np.ndarray], steps: list[tuple[int, int]]
             ) -> tuple[list[tuple[int, int]], int]:
    """The host windows the Execution Trace's ops map onto: the whole trace where every name is counted alike
    (recorded over the same steps), else each step whose counts equal the Execution Trace's (recorded over one
    step of the same program, as the runners do); and how many steps did not match."""
    whole = (np.iinfo(np.int64).min, np.iinfo(np.int64).max)
    if all(len(by_name.get(nm, ())) == c for nm, c in et.counts.items()):
        return [whole], 0
    ok = [(lo, hi) for lo, hi in steps
          if all(int(((a := by_name.get(nm, np.zeros((0, 3), np.int64)))[:, 0] >= lo).sum()
                     - (a[:, 0] >= hi).sum()) == c for nm, c in et.counts.items())]
    return ok, len(steps) - len(ok)


def _process_id(ops: pd.DataFrame) -> int:
    pid = ops.loc[ops["kind"].astype(str) == "cpu_op", "pid"] if "kind" in ops else ops["pid"]
    return int(pid.mode().iloc[0]) if len(pid) else -1


def check_process(et: ExecTrace, ops: pd.DataFrame, rank: int) -> None:
    """Refuse an Execution Trace that another process recorded (another rank's, or another run's)."""
    pid = _process_id(ops)
    if pid > 0 and et.pid > 0 and pid != et.pid:
        raise BadInputError(et.path, f"recorded by process {et.pid}, but rank {rank}'s trace is process {pid}: "
                                     "not this rank's Execution Trace (--et files are matched by the rank in their "
                                     "name, e.g. rank3.et.json.gz)")


def et_roles(et: ExecTrace, ops: pd.DataFrame, names: Sequence[str], launch: np.ndarray, ltid: np.ndarray,
             cat: np.ndarray, cat_codes: dict[str, int], steps: list[tuple[int, int]], role: np.ndarray,
             module: np.ndarray, modules: list[str]) -> str:
    """Set role and module (in place; modules grows) of the rows the Execution Trace ties to its all-gathers'
    consumers, in each host window it maps onto (steps: the host step ranges; cat: each row's category code, as
    cat_codes, rank_graph.CAT_CODES, names them); returns the note that says what came from it."""
    comm_code, compute_code = cat_codes["comm"], cat_codes["compute"]
    others = tuple(c for c in cat_codes.values() if c != comm_code)
    by_name = _numbered(ops, names, set(et.counts))
    windows, unmatched = _windows(et, by_name, steps)
    order = np.argsort(launch, kind="stable")
    sorted_launch = launch[order]

    def rows_of(key: tuple[str, int] | None, lo: int, hi: int, cats: tuple[int, ...]) -> np.ndarray:
        if key is None or key[0] not in by_name:
            return np.zeros(0, dtype=np.int64)
        a = by_name[key[0]]
        a = a[(a[:, 0] >= lo) & (a[:, 0] < hi)]
        if key[1] >= len(a):
            return np.zeros(0, dtype=np.int64)
        s, e, tid = a[key[1]].tolist()
        r = order[np.searchsorted(sorted_launch, s):np.searchsorted(sorted_launch, e)]
        return r[(ltid[r] == tid) & (launch[r] != NO_TIME) & np.isin(cat[r], cats)]

    used = 0
    for w, (lo, hi) in enumerate(windows):
        for lk in et.links:
            if lk.consumer is None or not lk.gather:
                continue
            comm = rows_of(lk.collective, lo, hi, (comm_code,))
            use = rows_of(lk.consumer, lo, hi, (compute_code,))
            if not len(comm) or not len(use):
                continue
            m = len(modules)
            modules.append(f"{ET_MODULE_PREFIX}{lk.collective[0]}#{lk.collective[1]}" + (f"@{w}" if w else ""))
            parts = [(comm, GATHER), (rows_of(lk.producer, lo, hi, others), GATHER),
                     *((rows_of(k, lo, hi, tuple(cat_codes.values())), COPY_OUT) for k in lk.copy_outs), (use, FORWARD)]
            for rows, code in parts:
                role[rows], module[rows] = code, m
            used += 1
    where = "the whole trace" if windows and windows[0][0] == np.iinfo(np.int64).min else f"{len(windows)} steps"
    note = (f"data dependencies: {used} all-gathers' consumers from the Execution Trace {et.path} "
            f"({sum(lk.gather and lk.consumer is not None for lk in et.links)} in it, mapped onto {where})")
    if unmatched:
        note += (f"; {unmatched} steps not matched (their ops of {', '.join(sorted(et.counts))} are not counted as "
                 "in the Execution Trace)")
    return note
