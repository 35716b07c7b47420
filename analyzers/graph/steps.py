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
    (node ending the step: the next step's first node, or the step's last-ending node)."""
    out = []
    for r in sg.ranks:
        b, n = sg.base[r], sg.graphs[r].n
        if not n:
            continue
        s, e, st = start[b:b + n], end[b:b + n], sg.step[b:b + n]
        if not (st >= 0).any():
            st = np.full(n, WHOLE, dtype=np.int64)
        on = np.flatnonzero(st >= WHOLE if (st == WHOLE).all() else st >= 0)
        o = on[np.lexsort((s[on], st[on]))]
        w = st[o]
        heads = np.flatnonzero(np.r_[True, w[1:] != w[:-1]])
        steps = w[heads]
        first_pos = np.minimum.reduceat(np.arange(len(o)), heads)  # rows sorted by start within a step
        first = o[first_pos]
        t0 = s[first]
        by_t0 = np.argsort(t0, kind="stable")
        steps, first, t0 = steps[by_t0], first[by_t0], t0[by_t0]
        t1 = np.r_[t0[1:], 0].astype(np.int64)
        last_node = np.r_[first[1:], -1].astype(np.int64)
        tail = o[heads[by_t0[-1]]:(heads[by_t0[-1] + 1] if by_t0[-1] + 1 < len(heads) else len(o))]
        li = tail[int(np.argmax(e[tail]))]
        t1[-1], last_node[-1] = e[li], li
        out.append(pd.DataFrame({"rank": r, "step": steps, "t0": t0, "t1": t1, "dur_ns": np.maximum(t1 - t0, 0),
                                 "first": first + b, "last_node": last_node + b, "ends_at_end": False}))
        out[-1].loc[out[-1].index[-1], "ends_at_end"] = True
    cols = ["rank", "step", "t0", "t1", "dur_ns", "first", "last_node", "ends_at_end"]
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame({c: [] for c in cols})


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
