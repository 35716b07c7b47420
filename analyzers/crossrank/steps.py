"""Which iteration launched each GPU activity of one rank, for the order comparison.

It depends on that rank alone (its host step ranges and launch times), and finding the step
ranges is the costliest per-rank part of the cross-rank stage; the per-rank stage can compute
it beside the parse, in parallel, and hand it to analyze_cross_rank (steps=...).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.timeline.iterations import DEFAULT_STEP_PATTERN, assign_steps, host_steps
from analyzers.timeline.model import RankTrace


@dataclass(frozen=True)
class RankSteps:
    """Per GPU row of one rank's table, the iteration (seg) its launch fell in."""

    pattern: str  # the step pattern it was found with (CrossRankParams.step_pattern)
    has_steps: bool  # the rank has host step ranges
    # The step number; -1 before the first step's GPU window (the profiler may have cut the
    # trace there), -2 after it or without steps. In the smallest signed integer type that holds
    # them (a rank's row count of them travels back from the per-rank stage and waits there for the
    # cross-rank stage): read it with as_int64.
    seg: np.ndarray

    def as_int64(self) -> np.ndarray:
        return self.seg.astype(np.int64)


def rank_steps(trace: RankTrace, pattern: str = DEFAULT_STEP_PATTERN) -> RankSteps:
    """The steps of one rank's GPU rows; valid for that trace's tables only (after any step
    selection, the table it is given to analyze_cross_rank with)."""
    steps = host_steps(trace, pattern)
    start = trace.gpu["start_ns"].to_numpy(dtype=np.int64)
    if steps.empty:
        return RankSteps(pattern, False, np.full(len(start), -2, dtype=np.int8))
    step = assign_steps(trace, steps)
    # Start of the first step's GPU window (iterations.gpu_step_windows: the earliest start of
    # the activities the steps launched), without building the windows.
    in_step = start[step >= 0]
    first = int(in_step.min()) if len(in_step) else np.iinfo(np.int64).max
    seg = np.where(step >= 0, step, np.where(start < first, -1, -2))
    return RankSteps(pattern, True, seg.astype(_narrowest(int(seg.max(initial=-2)))))


def _narrowest(top: int) -> type[np.signedinteger]:
    """The smallest signed integer type holding -2..top."""
    for t in (np.int8, np.int16, np.int32):
        if top <= np.iinfo(t).max:
            return t
    return np.int64
