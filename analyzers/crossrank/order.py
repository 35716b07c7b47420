"""Scheduling-order mismatches: ranks that start two streams' kernels in different orders before a dependency."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analyzers.crossrank.frames import _Frames
from analyzers.crossrank.report import CrossRankParams
from analyzers.timeline.iterations import assign_steps, gpu_step_windows, host_steps
from analyzers.timeline.model import RankTrace, TraceSet

# --------------------------------------------------------------------------- scheduling-order mismatch

_MISMATCH_COLUMNS = [
    "rank_a", "rank_b", "step", "coll_id", "coll_name", "n_swapped_pairs",
    "kernel_x", "stream_x", "kernel_y", "stream_y",
    "x_start_ns_a", "y_start_ns_a", "x_start_ns_b", "y_start_ns_b", "first_on_a", "first_on_b",
    "dependency_start_ns", "dependency_stream", "wait_caused_ns", "max_wait_ns", "waiting_rank", "late_rank",
    "delaying_rank", "explains_wait",
]


def find_order_mismatches(traces: TraceSet, frames: _Frames, role_labels: dict[int, str], colls: pd.DataFrame,
                          members: pd.DataFrame, offsets: dict[int, int],
                          params: CrossRankParams) -> tuple[pd.DataFrame, dict[str, Any], list[str]]:
    """Kernel pairs on two role-matched streams that start in one order on the reference rank and
    in the other order on rank b, followed (on either stream, same iteration) by a matched
    collective: that collective's peer wait is the cost.

    "Same kernel" = same stream role, same name, same position counted from the last matched
    collective on that stream (see _kernel_keys). Only compute and comm kernels take part
    (params.order_categories): a memset or the ordering sleep kernel itself occupies no SMs.
    Vectorized per stream-role pair: for each kernel x on role X, the Y kernels definitely after
    x on rank a (start > x + gap) and definitely before x on rank b (start < x - gap) are a suffix
    and a prefix of Y's FIFO order, so two searchsorted calls find them all.
    """
    ref = frames.ref
    gap = params.min_order_gap_ns
    notes: list[str] = []
    empty = pd.DataFrame(columns=_MISMATCH_COLUMNS)
    summary: dict[str, Any] = {"n_mismatches": 0, "n_swapped_pairs": 0, "n_swaps_without_dependency": 0,
                               "wait_caused_ns": 0, "n_explaining_wait": 0, "kernels_compared": 0,
                               "role_pairs": 0}
    if frames.by_rank[ref].empty or len(frames.ranks) < 2:
        return empty, summary, notes
    keyed = {r: _kernel_keys(traces.ranks[r], frames.by_rank[r], members, r, params) for r in frames.ranks}
    a = keyed[ref]
    loose = a[(a["seg"] == -2) & (a["anchor"] == -1)]["role"].unique()
    if len(loose):
        notes.append(f"no step ranges and no collective on {', '.join(role_labels.get(int(x), str(x)) for x in loose)}"
                     ": its kernels are paired by occurrence since the trace start, which a profiler window opening "
                     "at a different kernel on each rank would shift")
    deps = a[a["coll_id"] >= 0].sort_values("start", kind="stable")
    dep_by_role = {int(r): (g["start"].to_numpy(), g["coll_id"].to_numpy(), g["step"].to_numpy())
                   for r, g in deps.groupby("role")}
    coll_info = colls.set_index("coll_id") if len(colls) else None
    wait_cols = {r: f"wait_ns_r{r}" for r in frames.ranks}
    rows: list[pd.DataFrame] = []
    checks: list[dict[str, Any]] = []
    summary["order_checks"] = checks
    skipped_roles: set[tuple[int, int]] = set()
    for rb in frames.ranks[1:]:
        b = keyed[rb]
        if b.empty:
            continue
        both = a.merge(b[["role", "seg", "anchor", "gname", "k", "start"]], on=["role", "seg", "anchor", "gname", "k"],
                       suffixes=("_a", "_b"))
        roles = sorted(both["role"].unique().tolist())
        by_role = {r: g.sort_values("start_a", kind="stable") for r, g in both.groupby("role")}
        prod = both[both["compute"].to_numpy()]
        firsts = prod.groupby(["role", "step"])[["start_a", "start_b"]].min()
        for i, rx in enumerate(roles):
            for ry in roles[i + 1:]:
                xs, ys = by_role[rx], by_role[ry]
                ya, yb = ys["start_a"].to_numpy(), ys["start_b"].to_numpy()
                if np.any(np.diff(yb) < 0) or np.any(np.diff(xs["start_b"].to_numpy()) < 0):
                    skipped_roles.add((rx, ry))  # FIFO order differs: the role match is wrong
                    continue
                summary["role_pairs"] += 1
                summary["kernels_compared"] += len(xs) + len(ys)
                xa, xb = xs["start_a"].to_numpy(), xs["start_b"].to_numpy()
                hi_a = np.searchsorted(ya, xa + gap, side="right")  # y's from here start after x on a
                lo_b = np.searchsorted(yb, xb - gap, side="left")  # y's before here start before x on b
                lo_a = np.searchsorted(ya, xa - gap, side="left")
                hi_b = np.searchsorted(yb, xb + gap, side="right")
                sw1, sw2 = lo_b > hi_a, lo_a > hi_b  # x first on a / y first on a
                hit = sw1 | sw2
                checks.append(_order_check(ref, rb, role_labels.get(rx, str(rx)), role_labels.get(ry, str(ry)),
                                           xs, ys, (hi_a > lo_a) | (hi_b > lo_b), hit, firsts, rx, ry,
                                           params.max_listed))
                if not hit.any():
                    continue
                j = np.where(sw1, hi_a, hi_b)[hit]
                n_pairs = np.where(sw1, lo_b - hi_a, lo_a - hi_b)[hit]
                xh = xs.iloc[np.flatnonzero(hit)]
                yh = ys.iloc[j]
                t0 = np.minimum(xh["start_a"].to_numpy(), yh["start_a"].to_numpy())
                step0 = np.minimum(xh["step"].to_numpy(), yh["step"].to_numpy())
                dep_t, dep_id, on_y = _next_dependency(t0, step0, [dep_by_role.get(rx), dep_by_role.get(ry)])
                # The rank that ran the kernel of the stream *without* the dependency first delays
                # the dependency; if the swap explains the wait, that rank is the late one there.
                x_first_a = sw1[hit]
                delayer = np.where(on_y == x_first_a, ref, rb)
                rows.append(pd.DataFrame({
                    "rank_a": ref, "rank_b": rb, "step": step0, "coll_id": dep_id, "n_swapped_pairs": n_pairs,
                    "kernel_x": frames.names[xh["gname"].to_numpy()], "stream_x": role_labels.get(rx, str(rx)),
                    "kernel_y": frames.names[yh["gname"].to_numpy()], "stream_y": role_labels.get(ry, str(ry)),
                    "x_start_ns_a": xh["start_a"].to_numpy() + offsets.get(ref, 0),
                    "y_start_ns_a": yh["start_a"].to_numpy() + offsets.get(ref, 0),
                    "x_start_ns_b": xh["start_b"].to_numpy() + offsets.get(rb, 0),
                    "y_start_ns_b": yh["start_b"].to_numpy() + offsets.get(rb, 0),
                    "first_on_a": np.where(sw1[hit], "x", "y"), "first_on_b": np.where(sw1[hit], "y", "x"),
                    "dependency_start_ns": dep_t + offsets.get(ref, 0),
                    "dependency_stream": np.where(on_y, role_labels.get(ry, str(ry)), role_labels.get(rx, str(rx))),
                    "delaying_rank": delayer,
                }))
    if skipped_roles:
        notes.append(f"{len(skipped_roles)} stream-role pairs skipped: the same stream runs its kernels in a "
                     "different order on another rank, so its kernels cannot be paired")
    if not rows:
        return empty, summary, notes
    det = pd.concat(rows, ignore_index=True)
    summary["n_swaps_without_dependency"] = int((det["coll_id"] < 0).sum())
    det = det[det["coll_id"] >= 0]
    if det.empty:
        return empty, summary, notes
    # One mismatch per (rank pair, downstream collective): the earliest swapped pair stands for it.
    det = det.assign(_t=np.minimum(det["x_start_ns_a"], det["y_start_ns_a"]))
    det = det.sort_values(["rank_b", "coll_id", "_t"], kind="stable")
    n_pairs = det.groupby(["rank_b", "coll_id"])["n_swapped_pairs"].transform("sum")
    out = det.assign(n_swapped_pairs=n_pairs.to_numpy()).drop_duplicates(["rank_b", "coll_id"]).drop(columns="_t")
    ci = coll_info.reindex(out["coll_id"].to_numpy()) if coll_info is not None else None
    out["coll_name"] = ci["coll_name"].to_numpy() if ci is not None else ""
    pair_wait = np.zeros(len(out), dtype=np.int64)
    waiting = np.full(len(out), -1, dtype=np.int64)
    for rank_b in out["rank_b"].unique():  # over ranks: wait of the two ranks compared, at that collective
        sel = (out["rank_b"] == rank_b).to_numpy()
        wa = ci[wait_cols[ref]].to_numpy(dtype=float, na_value=np.nan)[sel]
        wb = ci[wait_cols[int(rank_b)]].to_numpy(dtype=float, na_value=np.nan)[sel]
        wa, wb = np.nan_to_num(wa), np.nan_to_num(wb)
        pair_wait[sel] = np.maximum(wa, wb).astype(np.int64)
        waiting[sel] = np.where(wb > wa, int(rank_b), ref)
    out["wait_caused_ns"] = pair_wait
    out["waiting_rank"] = np.where(pair_wait > 0, waiting, -1)
    out["max_wait_ns"] = ci["max_wait_ns"].to_numpy() if ci is not None else 0
    out["late_rank"] = ci["late_rank"].to_numpy() if ci is not None else -1
    out["explains_wait"] = (out["late_rank"].to_numpy() == out["delaying_rank"].to_numpy()) & (pair_wait > 0)
    out = out[_MISMATCH_COLUMNS].sort_values(["dependency_start_ns", "rank_b"], kind="stable").reset_index(drop=True)
    explains = out["explains_wait"].to_numpy(dtype=bool)
    summary.update({"n_mismatches": int(len(out)), "n_swapped_pairs": int(out["n_swapped_pairs"].sum()),
                    "wait_caused_ns": int(out["wait_caused_ns"].to_numpy()[explains].sum()),
                    "n_explaining_wait": int(explains.sum())})
    return out, summary, notes


def _kernel_keys(trace: RankTrace, df: pd.DataFrame, members: pd.DataFrame, rank: int,
                 params: CrossRankParams) -> pd.DataFrame:
    """The kernels of one rank that take part in order comparison, with a key that names the
    same kernel on every rank: (role, seg, anchor, gname, k).

    Profilers open and close at slightly different moments on each rank, so "the k-th kernel of
    this name on this stream" must be counted from something every rank has:
    - seg: the iteration whose host step launched the kernel (ProfilerStep#N carries the same N
      on every rank); -1 for kernels before the first step, -2 after the last or without steps;
    - anchor: the matched collective last issued on the same stream (FIFO: the same on every
      rank, whatever the timing);
    - k: occurrence of that name since (seg, anchor). Where the trace may be cut at the front
      (before the first step, or before a stream's first collective when there are no steps),
      k counts backwards instead.
    """
    cat = trace.gpu["category"]
    keep = cat.isin(list(params.order_categories)).to_numpy()
    d = df[keep[df["row"].to_numpy()]].sort_values(["role", "start"], kind="stable").copy()
    d["compute"] = (cat.to_numpy() == "compute")[d["row"].to_numpy()]
    mine = members[members["rank"] == rank] if len(members) else members
    coll_of_row = pd.Series(mine["coll_id"].to_numpy(), index=mine["row"].to_numpy()) if len(mine) else \
        pd.Series(dtype=np.int64)
    d["coll_id"] = coll_of_row.reindex(d["row"].to_numpy()).fillna(-1).to_numpy(dtype=np.int64)
    steps = host_steps(trace, params.step_pattern)
    has_steps = not steps.empty
    if has_steps:
        step = assign_steps(trace, steps)[d["row"].to_numpy()]
        windows = gpu_step_windows(trace, params.step_pattern)
        first = int(windows["gpu_start_ns"].min()) if len(windows) else np.iinfo(np.int64).max
        d["seg"] = np.where(step >= 0, step, np.where(d["start"].to_numpy() < first, -1, -2))
    else:
        d["seg"] = -2
    marks = d["coll_id"].where(d["coll_id"] >= 0)
    after = marks.groupby(d["role"]).ffill()
    before = marks.groupby(d["role"]).bfill()
    head = after.isna().to_numpy()
    d["anchor"] = np.where(~head, after.fillna(-1).to_numpy(),
                           np.where(before.notna().to_numpy(), -2 - before.fillna(0).to_numpy(), -1)).astype(np.int64)
    by = ["role", "seg", "anchor", "gname"]
    fwd = d.groupby(by).cumcount().to_numpy()
    back = d.groupby(by).cumcount(ascending=False).to_numpy()
    cut_front = (d["seg"].to_numpy() == -1) if has_steps else (head & (d["anchor"].to_numpy() <= -2))
    d["k"] = np.where(cut_front, -1 - back, fwd)
    d["step"] = np.maximum(d["seg"].to_numpy(), -1)
    return d


def _order_check(ra: int, rb: int, sx: str, sy: str, xs: pd.DataFrame, ys: pd.DataFrame, ties: np.ndarray,
                 hit: np.ndarray, firsts: pd.DataFrame, rx: int, ry: int, cap: int) -> dict[str, Any]:
    """The evidence behind a verdict for one rank pair and stream-role pair, also when nothing
    was found: how many kernels were compared, how many started too close to judge, and per
    iteration which stream's first compute kernel started first on each rank
    (lead = first Y compute start - first X compute start; steps where a stream computes nothing
    are left out; the per-step lists are cut at cap)."""
    roles = firsts.index.get_level_values("role")
    fx = firsts.loc[rx] if rx in roles else firsts.iloc[:0].droplevel("role")
    fy = firsts.loc[ry] if ry in roles else firsts.iloc[:0].droplevel("role")
    steps = fx.index.intersection(fy.index)
    lead_a = (fy.loc[steps, "start_a"] - fx.loc[steps, "start_a"]).to_numpy()
    lead_b = (fy.loc[steps, "start_b"] - fx.loc[steps, "start_b"]).to_numpy()
    agree = np.sign(lead_a) == np.sign(lead_b)
    return {
        "rank_a": ra, "rank_b": rb, "stream_x": sx, "stream_y": sy,
        "kernels_x": int(len(xs)), "kernels_y": int(len(ys)),
        "near_ties": int(ties.sum()), "swapped": int(hit.sum()),
        "steps": int(len(steps)), "steps_same_first_stream": int(agree.sum()),
        "first_lead_ns_a": [int(v) for v in lead_a[:cap]], "first_lead_ns_b": [int(v) for v in lead_b[:cap]],
    }


def _next_dependency(t0: np.ndarray, step0: np.ndarray, cands: list[tuple[np.ndarray, np.ndarray, np.ndarray] | None]
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """First matched collective at or after t0 on either stream (cands: X's, Y's), in the same
    iteration: its start (-1: none), its id (-1) and whether it is on the second stream (Y)."""
    best_t = np.full(t0.size, np.iinfo(np.int64).max, dtype=np.int64)
    best_id = np.full(t0.size, -1, dtype=np.int64)
    on_second = np.zeros(t0.size, dtype=bool)
    for i, c in enumerate(cands):
        if c is None or c[0].size == 0:
            continue
        starts, ids, steps = c
        k = np.searchsorted(starts, t0, side="left")
        ok = k < starts.size
        kc = np.clip(k, 0, starts.size - 1)
        ok &= steps[kc] == step0
        better = ok & (starts[kc] < best_t)
        best_t = np.where(better, starts[kc], best_t)
        best_id = np.where(better, ids[kc], best_id)
        on_second = np.where(better, i == 1, on_second)
    return np.where(best_id >= 0, best_t, -1), best_id, on_second
