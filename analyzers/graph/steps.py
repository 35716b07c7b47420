"""Step durations of a replay (or of the measured times), per rank and for the job.

A rank's step N runs on the GPU from the first start of the activities launched in step N's host
range (ProfilerStep#N, or an NVTX range of that name) to the first start of step N+1's (the last
step: to its last end), as analyzers.timeline.iterations places steps. The job's step N is the
slowest rank's. A rank without step ranges has one step, its whole recorded window (step -1).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analyzers.graph.set_graph import SetGraph

WHOLE = -1  # the step number of a rank's whole window when it has no step ranges


class _Groups:
    """Each rank's step groups (rank, step; or the rank's whole window): they depend on the graph only,
    so every replay's steps reuse them. Members are in node order within a group."""

    def __init__(self, sg: SetGraph) -> None:
        rank, step = sg.rank_of, sg.step.copy()
        with_steps = np.unique(rank[step >= 0])
        whole = ~np.isin(rank, with_steps)
        step[whole] = WHOLE
        idx = np.flatnonzero((step >= 0) | whole)
        self.nodes = idx[np.lexsort((step[idx], rank[idx]))]
        r, st = rank[self.nodes], step[self.nodes]
        self.heads = np.flatnonzero(np.r_[True, (r[1:] != r[:-1]) | (st[1:] != st[:-1])]) if len(idx) else idx
        self.sizes = np.diff(np.r_[self.heads, len(idx)])
        self.rank, self.step = r[self.heads], st[self.heads]


def _groups(sg: SetGraph) -> _Groups:
    cached = getattr(sg, "_step_groups", None)
    if cached is None:
        cached = _Groups(sg)
        sg._step_groups = cached  # type: ignore[attr-defined]
    return cached


def rank_steps(sg: SetGraph, start: np.ndarray, end: np.ndarray) -> pd.DataFrame:
    """Columns rank, step, t0, t1, dur_ns, first (node whose start opens the step: the earliest, the
    lowest node at ties), last_node (node ending the step: the next step's first node, or the step's
    last-ending node, the earliest-starting at ties), ends_at_end (the step ends at last_node's end,
    not its start)."""
    cols = ["rank", "step", "t0", "t1", "dur_ns", "first", "last_node", "ends_at_end"]
    gr = _groups(sg)
    if not len(gr.nodes):
        return pd.DataFrame({c: [] for c in cols})
    s = start[gr.nodes]
    t0 = np.minimum.reduceat(s, gr.heads)
    at_min = np.flatnonzero(s == np.repeat(t0, gr.sizes))
    first = gr.nodes[at_min[np.searchsorted(at_min, gr.heads)]]
    lo, hi = gr.heads, gr.heads + gr.sizes
    g = np.lexsort((t0, gr.rank))  # groups of a rank by their first start
    first, g_rank, g_step, t0, lo, hi = first[g], gr.rank[g], gr.step[g], t0[g], lo[g], hi[g]
    same_next = np.r_[g_rank[1:] == g_rank[:-1], False]
    t1 = np.where(same_next, np.r_[t0[1:], 0], 0).astype(np.int64)
    last_node = np.where(same_next, np.r_[first[1:], -1], -1).astype(np.int64)
    for k in np.flatnonzero(~same_next).tolist():  # each rank's last step: to its last end
        nodes = gr.nodes[lo[k]:hi[k]]
        e = end[nodes]
        cand = nodes[e == e.max()]
        li = cand[np.lexsort((cand, start[cand]))[0]]
        t1[k], last_node[k] = end[li], li
    return pd.DataFrame({"rank": g_rank, "step": g_step, "t0": t0, "t1": t1, "dur_ns": np.maximum(t1 - t0, 0),
                         "first": first, "last_node": last_node, "ends_at_end": ~same_next})


def job_steps(per_rank: pd.DataFrame) -> pd.DataFrame:
    """Per step: the slowest rank and its duration (columns step, rank, dur_ns; the lowest rank at ties)."""
    if per_rank.empty:
        return pd.DataFrame({"step": [], "rank": [], "dur_ns": []})
    step, dur, rank = (per_rank[c].to_numpy() for c in ("step", "dur_ns", "rank"))
    o = np.lexsort((rank, -dur, step))
    top = o[np.r_[True, step[o][1:] != step[o][:-1]]]
    return pd.DataFrame({"step": step[top], "rank": rank[top], "dur_ns": dur[top]})


def median_ns(values: pd.Series | np.ndarray) -> int | None:
    v = np.asarray(values, dtype=np.float64)
    return int(round(float(np.median(v)))) if len(v) else None


def step_records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of a steps table (steps.rank_steps) as dicts of Python ints: the walk reads a few fields of
    every step, which pandas rows (iterrows: a Series per row) made the slowest part of 20,000 steps."""
    cols = {c: df[c].to_numpy().tolist() for c in df.columns}
    return [dict(zip(cols, vals, strict=True)) for vals in zip(*cols.values(), strict=True)]
