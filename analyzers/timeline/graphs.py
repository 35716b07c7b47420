"""CUDA-graph replays: which GPU activities one cudaGraphLaunch replayed.

Why: a graph replay is one host launch that runs many kernels. CUPTI (so Kineto and Nsight
Systems alike) gives every kernel of a replay the correlation id of the cudaGraphLaunch call
(Kineto may add the kernel's "graph id" / "graph node id" args, which we do not need). Analyses
that reason about launches (launch-bound gaps, what a blocking sync held back, a critical path)
must treat the replay as one launch: its kernels were all queued when the call returned, so a
gap between two of them is a dependency inside the graph, never the host launching late.

``mark_graph_launches`` adds the column ``graph_launch`` to the GPU table: the correlation id of
the graph launch that replayed the row, -1 for rows launched one by one (or whose launch record
is missing). Rows of one replay share the value, so ``gpu.groupby("graph_launch")`` gives the
replays. It is computed where the host tables are still at hand (the per-rank stage, after
classification) and stays with the GPU table when the host tables are left in the worker.
"""

from __future__ import annotations

import re

import numpy as np

from analyzers.timeline.model import RankTrace, require_host_tables

GRAPH_LAUNCH_COLUMN = "graph_launch"
# cudaGraphLaunch / cudaGraphLaunch_v10000 (nsys) / cuGraphLaunch (driver) / hipGraphLaunch (ROCm)
GRAPH_LAUNCH_API = re.compile(r"^(?:cuda|cu|hip)GraphLaunch(?:_v\d+)?(?:_ptsz)?$")


def graph_launch_correlations(trace: RankTrace) -> np.ndarray:
    """Correlation ids of the trace's graph-launch runtime calls (sorted, unique)."""
    rt = trace.runtime
    if rt.empty:
        return np.zeros(0, dtype=np.int64)
    ids = rt["name_id"].to_numpy()
    uniq = np.unique(ids)
    is_graph = np.array([bool(GRAPH_LAUNCH_API.match(trace.name_of(int(i)))) for i in uniq], dtype=bool)
    rows = np.isin(ids, uniq[is_graph])
    corr = rt["correlation"].to_numpy(np.int64)[rows]
    return np.unique(corr[corr >= 0])


def mark_graph_launches(trace: RankTrace) -> None:
    """Fill trace.gpu[GRAPH_LAUNCH_COLUMN] (see module docstring). Needs the host tables, so it runs
    before they are dropped (without_host_tables); a trace whose tables stayed in the worker keeps the
    column it was marked with there."""
    gpu = trace.gpu
    if GRAPH_LAUNCH_COLUMN in gpu.columns and trace.host_rows_kept_in_worker is not None:
        return
    require_host_tables(trace)
    out = np.full(len(gpu), -1, dtype=np.int64)
    graphs = graph_launch_correlations(trace)
    if len(gpu) and graphs.size:
        corr = gpu["correlation"].to_numpy(np.int64)
        hit = np.isin(corr, graphs)
        out[hit] = corr[hit]
    gpu[GRAPH_LAUNCH_COLUMN] = out


def graph_launch_of(trace: RankTrace) -> np.ndarray:
    """The graph launch of each GPU row (-1: none), marking the trace first if it is not yet."""
    if GRAPH_LAUNCH_COLUMN not in trace.gpu.columns:
        mark_graph_launches(trace)
    return trace.gpu[GRAPH_LAUNCH_COLUMN].to_numpy(np.int64)


def graph_replay_summary(trace: RankTrace) -> dict[str, int]:
    """How many graph replays the trace holds and how many GPU activities they ran."""
    g = graph_launch_of(trace)
    replayed = g[g >= 0]
    return {"n_graph_launches": int(np.unique(replayed).size), "n_graph_kernels": int(replayed.size)}
