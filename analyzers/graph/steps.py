"""Step durations of a replay (or of the measured times), per rank and for the job.

A rank's step N runs on the GPU from the first start of the activities launched in step N's host
range (ProfilerStep#N, or an NVTX range of that name) to the first start of step N+1's (the last
step: to its last end), as analyzers.timeline.iterations places steps. The job's step N is the
slowest rank's. A rank without step ranges has one step, its whole recorded window (step -1).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzers.graph.set_graph import SetGraph

WHOLE = -1  # the step number of a rank's whole window when it has no step ranges


def rank_steps(sg: SetGraph, start: np.ndarray, end: np.ndarray) -> pd.DataFrame:
    """Columns rank, step, t0, t1, dur_ns, first (node whose start opens the step), last_node
    (node ending the step: the next step's first node, or the step's last-ending node), ends_at_end
    (the step ends at last_node's end, not its start). One sort over every rank's activities."""
    cols = ["rank", "step", "t0", "t1", "dur_ns", "first", "last_node", "ends_at_end"]
    rank, step = sg.rank_of, sg.step.copy()
    with_steps = np.unique(rank[step >= 0])
    whole = ~np.isin(rank, with_steps)
    step[whole] = WHOLE
    idx = np.flatnonzero((step >= 0) | whole)
    if not len(idx):
        return pd.DataFrame({c: [] for c in cols})
    o = idx[np.lexsort((start[idx], step[idx], rank[idx]))]
    r, st = rank[o], step[o]
    heads = np.flatnonzero(np.r_[True, (r[1:] != r[:-1]) | (st[1:] != st[:-1])])
    bounds = np.r_[heads, len(o)]
    first, g_rank, g_step = o[heads], r[heads], st[heads]
    t0 = start[first]
    g = np.lexsort((t0, g_rank))  # groups of a rank by their first start
    first, g_rank, g_step, t0 = first[g], g_rank[g], g_step[g], t0[g]
    lo, hi = bounds[:-1][g], bounds[1:][g]
    same_next = np.r_[g_rank[1:] == g_rank[:-1], False]
    t1 = np.where(same_next, np.r_[t0[1:], 0], 0).astype(np.int64)
    last_node = np.where(same_next, np.r_[first[1:], -1], -1).astype(np.int64)
    for k in np.flatnonzero(~same_next).tolist():  # each rank's last step: to its last end
        nodes = o[lo[k]:hi[k]]
        li = nodes[int(np.argmax(end[nodes]))]
        t1[k], last_node[k] = end[li], li
    return pd.DataFrame({"rank": g_rank, "step": g_step, "t0": t0, "t1": t1, "dur_ns": np.maximum(t1 - t0, 0),
                         "first": first, "last_node": last_node, "ends_at_end": ~same_next})


def job_steps(per_rank: pd.DataFrame) -> pd.DataFrame:
    """Per step: the slowest rank and its duration (columns step, rank, dur_ns)."""
    if per_rank.empty:
        return pd.DataFrame({"step": [], "rank": [], "dur_ns": []})
    o = per_rank.sort_values(["step", "dur_ns", "rank"], ascending=[True, False, True], kind="stable")
    top = o.drop_duplicates("step", keep="first")
    return top[["step", "rank", "dur_ns"]].reset_index(drop=True)


def median_ns(values: pd.Series | np.ndarray) -> int | None:
    v = np.asarray(values, dtype=np.float64)
    return int(round(float(np.median(v)))) if len(v) else None
