"""Per-iteration overlap metrics of every window at once (the `iterations` table of RankMetrics).

One window at a time cost ~40 numpy calls (~0.7 ms): 20,000 steps took 14 s. Here the rows of every
window are laid out as (window, row) pairs and each figure is one grouped pass
(analyzers/timeline/grouped_intervals.py): comm, compute and busy time are union lengths per window,
overlap is comm + compute - |comm or compute| (inclusion-exclusion on the unions), and compute/compute
overlap a sweep over each stream's union pieces counting the streams that run compute. The figures are
those of metrics._window_metrics, window by window.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzers.overlap.rows import GpuRows
from analyzers.timeline import grouped_intervals as gi


def iteration_table(rows: GpuRows, windows: pd.DataFrame) -> pd.DataFrame:
    """One row per window (step, name, then OverlapMetrics' fields), in the windows' order."""
    lo_w = windows["gpu_start_ns"].to_numpy(np.int64)
    hi_w = windows["gpu_end_ns"].to_numpy(np.int64)
    n = lo_w.size
    w, r = gi.window_pairs(rows.s, rows.e, lo_w, hi_w, points=True)
    lo, hi = lo_w[w], hi_w[w]
    cs, ce = np.clip(rows.s[r], lo, hi), np.clip(rows.e[r], lo, hi)
    comm, comp = rows.comm[r], rows.compute[r]
    comm_ns = gi.union_length(w[comm], cs[comm], ce[comm], n)
    comp_ns = gi.union_length(w[comp], cs[comp], ce[comp], n)
    either = comm | comp
    overlap_ns = comm_ns + comp_ns - gi.union_length(w[either], cs[either], ce[either], n)
    busy_ns = gi.union_length(w, cs, ce, n)
    n_gpu = np.bincount(w, minlength=n)
    first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(first, w, cs)
    np.maximum.at(last, w, ce)
    span_ns = np.where(n_gpu > 0, last - first, 0)
    cc = _compute_on_two_streams(w[comp], rows.stream[r[comp]], cs[comp], ce[comp], n)
    n_comm, n_comp = np.bincount(w[comm], minlength=n), np.bincount(w[comp], minlength=n)
    out = []
    for i, (step, name) in enumerate(zip(windows["step"].tolist(), windows["name"].tolist(), strict=True)):
        c, p, o, b, sp = int(comm_ns[i]), int(comp_ns[i]), int(overlap_ns[i]), int(busy_ns[i]), int(span_ns[i])
        out.append({"step": int(step), "name": name, "window_start_ns": int(lo_w[i]), "window_end_ns": int(hi_w[i]),
                    "comm_ns": c, "compute_ns": p, "overlap_ns": o, "exposed_comm_ns": c - o, "busy_ns": b,
                    "span_ns": sp, "idle_ns": sp - b, "compute_compute_overlap_ns": int(cc[i]),
                    "n_comm": int(n_comm[i]), "n_compute": int(n_comp[i]), "n_gpu": int(n_gpu[i]),
                    "overlap_ratio": float(o) / float(c) if c > 0 else None,
                    "hidden_fraction_of_min": float(o) / float(min(c, p)) if min(c, p) > 0 else None})
    return pd.DataFrame(out)


def _compute_on_two_streams(w: np.ndarray, stream: np.ndarray, s: np.ndarray, e: np.ndarray, n: int) -> np.ndarray:
    """Per window: time during which compute runs on two streams or more (each stream's union first)."""
    out = np.zeros(n, dtype=np.int64)
    if not w.size:
        return out
    _, code = np.unique(stream, return_inverse=True)
    code = code.ravel().astype(np.int64)
    n_streams = int(code.max()) + 1
    group = w.astype(np.int64) * n_streams + code
    order, start, piece = gi.union_pieces(group, s, e)
    real = piece > 0
    pw, ps, pe = w[order][real], start[real], (start + piece)[real]
    # sweep per window: +1 at a piece's start, -1 at its end (ends first at equal times)
    t = np.r_[ps, pe]
    delta = np.r_[np.ones(ps.size, dtype=np.int64), -np.ones(pe.size, dtype=np.int64)]
    ww = np.r_[pw, pw]
    by = np.lexsort((delta, t, ww))
    t, delta, ww = t[by], delta[by], ww[by]
    count = gi._grouped_cumsum(ww, delta)
    same = np.r_[ww[1:] == ww[:-1], False]
    gap = np.where(same, np.r_[t[1:], 0] - t, 0)
    np.add.at(out, ww, np.where(count >= 2, gap, 0))
    return out
