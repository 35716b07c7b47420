"""Scheduling-order mismatches: ranks that start two streams' kernels in different orders before a dependency."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from analyzers.crossrank.frames import _codes, _Frames, _pack, _ranges, _RankRows, _runs, _slices
from analyzers.crossrank.report import CrossRankParams
from analyzers.crossrank.steps import RankSteps, rank_steps
from analyzers.timeline.model import RankTrace, TraceSet

# --------------------------------------------------------------------------- scheduling-order mismatch

_KEY = ("role", "seg", "anchor", "gname", "k")  # names the same kernel on every rank (see _kernel_keys)
_MISMATCH_COLUMNS = [
    "rank_a", "rank_b", "step", "coll_id", "coll_name", "n_swapped_pairs",
    "kernel_x", "stream_x", "kernel_y", "stream_y",
    "x_start_ns_a", "y_start_ns_a", "x_start_ns_b", "y_start_ns_b", "first_on_a", "first_on_b",
    "dependency_start_ns", "dependency_stream", "wait_caused_ns", "max_wait_ns", "waiting_rank", "late_rank",
    "delaying_rank", "explains_wait",
]


def find_order_mismatches(traces: TraceSet, frames: _Frames, role_labels: dict[int, str], colls: pd.DataFrame,
                          members: pd.DataFrame, offsets: dict[int, int],
                          params: CrossRankParams, steps: Mapping[int, RankSteps] | None = None
                          ) -> tuple[pd.DataFrame, dict[str, Any], list[str]]:
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
    if not len(frames.by_rank[ref]) or len(frames.ranks) < 2:
        return empty, summary, notes
    coll_rows = _member_rows(members)

    def keys_of(r: int) -> dict[str, np.ndarray]:
        return _kernel_keys(traces.ranks[r], frames.by_rank[r], coll_rows.get(r), params, (steps or {}).get(r))

    a = keys_of(ref)  # the other ranks' keys are made one rank at a time, compared with a's and dropped
    loose = pd.unique(a["role"][(a["seg"] == -2) & (a["anchor"] == -1)])
    if len(loose):
        notes.append(f"no step ranges and no collective on {', '.join(role_labels.get(int(x), str(x)) for x in loose)}"
                     ": its kernels are paired by occurrence since the trace start, which a profiler window opening "
                     "at a different kernel on each rank would shift")
    # a is sorted by (role, start): per role its matched collectives in start order.
    dep_by_role = {int(r): (a["start"][sl][m], a["coll_id"][sl][m], a["step"][sl][m])
                   for r, sl in _slices(a["role"]).items() if (m := a["coll_id"][sl] >= 0).any()}
    rows: list[dict[str, np.ndarray]] = []
    checks: list[dict[str, Any]] = []
    summary["order_checks"] = checks
    skipped_roles: set[tuple[int, int]] = set()
    for rb in frames.ranks[1:]:
        b = keys_of(rb)
        if not len(b["start"]):
            continue
        packed = _sorted_keys({ref: a, rb: b})
        # "Same kernel" on both ranks: one key per (role, seg, anchor, gname, k), unique within a rank.
        hit_b = _same_kernels(a, b, *((packed[ref], packed[rb]) if packed else (None, None)))
        in_both = hit_b >= 0
        both = {k: v[in_both] for k, v in a.items() if k != "order"}  # in a's order: sorted by (role, start)
        both["start_a"], both["start_b"] = both.pop("start"), b["start"][hit_b[in_both]]
        by_role = {r: {k: v[sl] for k, v in both.items()} for r, sl in _slices(both["role"]).items()}
        firsts = {r: _first_compute(g) for r, g in by_role.items()}
        roles = sorted(by_role)
        for i, rx in enumerate(roles):
            for ry in roles[i + 1:]:
                xs, ys = by_role[rx], by_role[ry]
                ya, yb = ys["start_a"], ys["start_b"]
                if np.any(np.diff(yb) < 0) or np.any(np.diff(xs["start_b"]) < 0):
                    skipped_roles.add((rx, ry))  # FIFO order differs: the role match is wrong
                    continue
                summary["role_pairs"] += 1
                summary["kernels_compared"] += len(xs["start_a"]) + len(ya)
                xa, xb = xs["start_a"], xs["start_b"]
                hi_a = np.searchsorted(ya, xa + gap, side="right")  # y's from here start after x on a
                lo_b = np.searchsorted(yb, xb - gap, side="left")  # y's before here start before x on b
                lo_a = np.searchsorted(ya, xa - gap, side="left")
                hi_b = np.searchsorted(yb, xb + gap, side="right")
                sw1, sw2 = lo_b > hi_a, lo_a > hi_b  # x first on a / y first on a
                hit = sw1 | sw2
                checks.append(_order_check(ref, rb, role_labels.get(rx, str(rx)), role_labels.get(ry, str(ry)),
                                           len(xa), len(ya), (hi_a > lo_a) | (hi_b > lo_b), hit,
                                           firsts[rx], firsts[ry], params.max_listed))
                if not hit.any():
                    continue
                j = np.where(sw1, hi_a, hi_b)[hit]
                n_pairs = np.where(sw1, lo_b - hi_a, lo_a - hi_b)[hit]
                xh = {k: v[hit] for k, v in xs.items()}
                yh = {k: v[j] for k, v in ys.items()}
                t0 = np.minimum(xh["start_a"], yh["start_a"])
                step0 = np.minimum(xh["step"], yh["step"])
                dep_t, dep_id, on_y = _next_dependency(t0, step0, [dep_by_role.get(rx), dep_by_role.get(ry)])
                # The rank that ran the kernel of the stream *without* the dependency first delays
                # the dependency; if the swap explains the wait, that rank is the late one there.
                x_first_a = sw1[hit]
                delayer = np.where(on_y == x_first_a, ref, rb)
                n = int(hit.sum())
                rows.append({  # columns of one frame, made once from all of them (not a frame per role pair)
                    "rank_a": np.full(n, ref), "rank_b": np.full(n, rb), "step": step0, "coll_id": dep_id,
                    "n_swapped_pairs": n_pairs,
                    "kernel_x": frames.names[xh["gname"]], "stream_x": np.full(n, role_labels.get(rx, str(rx)), object),
                    "kernel_y": frames.names[yh["gname"]], "stream_y": np.full(n, role_labels.get(ry, str(ry)), object),
                    "x_start_ns_a": xh["start_a"] + offsets.get(ref, 0),
                    "y_start_ns_a": yh["start_a"] + offsets.get(ref, 0),
                    "x_start_ns_b": xh["start_b"] + offsets.get(rb, 0),
                    "y_start_ns_b": yh["start_b"] + offsets.get(rb, 0),
                    "first_on_a": np.where(sw1[hit], "x", "y").astype(object),
                    "first_on_b": np.where(sw1[hit], "y", "x").astype(object),
                    "dependency_start_ns": dep_t + offsets.get(ref, 0),
                    "dependency_stream": np.where(on_y, role_labels.get(ry, str(ry)),
                                                  role_labels.get(rx, str(rx))).astype(object),
                    "delaying_rank": delayer,
                })
    if skipped_roles:
        notes.append(f"{len(skipped_roles)} stream-role pairs skipped: the same stream runs its kernels in a "
                     "different order on another rank, so its kernels cannot be paired")
    if not rows:
        return empty, summary, notes
    det = pd.DataFrame({k: np.concatenate([r[k] for r in rows]) for k in rows[0]})
    summary["n_swaps_without_dependency"] = int((det["coll_id"] < 0).sum())
    det = det[det["coll_id"] >= 0]
    if det.empty:
        return empty, summary, notes
    # One mismatch per (rank pair, downstream collective): the earliest swapped pair stands for it.
    det = det.assign(_t=np.minimum(det["x_start_ns_a"], det["y_start_ns_a"]))
    det = det.sort_values(["rank_b", "coll_id", "_t"], kind="stable")
    n_pairs = det.groupby(["rank_b", "coll_id"])["n_swapped_pairs"].transform("sum")
    out = det.assign(n_swapped_pairs=n_pairs.to_numpy()).drop_duplicates(["rank_b", "coll_id"]).drop(columns="_t")
    ids = out["coll_id"].to_numpy()
    ci = colls.set_index("coll_id")[["coll_name", "max_wait_ns", "late_rank"]].reindex(ids)
    out["coll_name"] = ci["coll_name"].to_numpy()
    # Wait of the two ranks compared, at that collective (0 where a rank is not in it).
    rank_b = out["rank_b"].to_numpy()
    wa, wb = _member_wait(members, ids, np.full(len(ids), ref)), _member_wait(members, ids, rank_b)
    pair_wait = np.maximum(wa, wb).astype(np.int64)
    waiting = np.where(wb > wa, rank_b, ref).astype(np.int64)
    out["wait_caused_ns"] = pair_wait
    out["waiting_rank"] = np.where(pair_wait > 0, waiting, -1)
    out["max_wait_ns"] = ci["max_wait_ns"].to_numpy()
    out["late_rank"] = ci["late_rank"].to_numpy()
    out["explains_wait"] = (out["late_rank"].to_numpy() == out["delaying_rank"].to_numpy()) & (pair_wait > 0)
    out = out[_MISMATCH_COLUMNS].sort_values(["dependency_start_ns", "rank_b"], kind="stable").reset_index(drop=True)
    explains = out["explains_wait"].to_numpy(dtype=bool)
    summary.update({"n_mismatches": int(len(out)), "n_swapped_pairs": int(out["n_swapped_pairs"].sum()),
                    "wait_caused_ns": int(out["wait_caused_ns"].to_numpy()[explains].sum()),
                    "n_explaining_wait": int(explains.sum())})
    return out, summary, notes


def _kernel_keys(trace: RankTrace, rows: _RankRows, colls_of_rows: tuple[np.ndarray, np.ndarray] | None,
                 params: CrossRankParams, steps: RankSteps | None = None) -> dict[str, np.ndarray]:
    """The kernels of one rank that take part in order comparison, sorted by (role, start), with a
    key that names the same kernel on every rank: (role, seg, anchor, gname, k).

    Profilers open and close at slightly different moments on each rank, so "the k-th kernel of
    this name on this stream" must be counted from something every rank has:
    - seg: the iteration whose host step launched the kernel (ProfilerStep#N carries the same N
      on every rank); -1 for kernels before the first step, -2 after the last or without steps;
    - anchor: the matched collective last issued on the same stream (FIFO: the same on every
      rank, whatever the timing);
    - k: occurrence of that name since (seg, anchor). Where the trace may be cut at the front
      (before the first step, or before a stream's first collective when there are no steps),
      k counts backwards instead.
    Returns arrays (role, start, gname, compute, coll_id, seg, anchor, k, step) and order, the
    permutation that sorts them by the full key; steps: rank_steps of this trace, if at hand.
    """
    cat = trace.gpu["category"]
    keep = np.zeros(len(cat), dtype=bool)
    for c in params.order_categories:  # == on the categorical compares codes: no strings per row
        keep |= (cat == c).to_numpy(dtype=bool)
    idx = np.flatnonzero(keep)
    idx = idx[np.lexsort((rows.start[idx], rows.role[idx]))]
    d = {"role": rows.role[idx], "start": rows.start[idx], "gname": rows.gname[idx],
         "compute": (cat == "compute").to_numpy(dtype=bool)[idx]}
    coll_of_row = np.full(len(rows), -1, dtype=np.int64)
    if colls_of_rows is not None:
        coll_of_row[colls_of_rows[0]] = colls_of_rows[1]
    d["coll_id"] = coll_of_row[idx]
    if steps is None or steps.pattern != params.step_pattern or len(steps.seg) != len(rows):
        steps = rank_steps(trace, params.step_pattern)
    has_steps = steps.has_steps
    d["seg"] = steps.as_int64()[idx]
    # Last matched collective at or before each kernel on its stream role, else the first after it.
    n, pos = len(idx), np.arange(len(idx))
    marked = d["coll_id"] >= 0
    role_start = pos - _runs(d["role"])
    role_end = role_start + np.bincount(role_start, minlength=n)[role_start] - 1
    after = np.maximum.accumulate(np.where(marked, pos, -1)) if n else pos
    before = np.minimum.accumulate(np.where(marked, pos, n)[::-1])[::-1] if n else pos
    head = after < role_start
    tail_ok = before <= role_end
    d["anchor"] = np.where(~head, d["coll_id"][np.maximum(after, 0)],
                           np.where(tail_ok, -2 - d["coll_id"][np.minimum(before, n - 1)], -1)).astype(np.int64)
    # Sorted by (role, seg, anchor, gname), start order kept within: each name's kernels since an
    # anchor are one run, counted from either end; the same order sorts by the full key (k included).
    o = _lex_order([d[c] for c in _KEY[:-1]])
    run = _runs(*(d[c][o] for c in _KEY[:-1])) if n else pos
    size = np.diff(np.r_[np.flatnonzero(run == 0), n])
    fwd, back = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    fwd[o], back[o] = run, np.repeat(size, size) - 1 - run
    cut_front = (d["seg"] == -1) if has_steps else (head & (d["anchor"] <= -2))
    d["k"] = np.where(cut_front, -1 - back, fwd)
    d["step"] = np.maximum(d["seg"], -1)
    d["order"] = o
    return d


def _lex_order(cols: list[np.ndarray]) -> np.ndarray:
    """Stable permutation sorting rows by the columns, first column first: one argsort of a packed
    key when the value ranges fit in an int64, else np.lexsort (the same permutation)."""
    packed = _pack(cols, *_ranges([cols])) if len(cols[0]) else None
    return np.lexsort(cols[::-1]) if packed is None else np.argsort(packed, kind="stable")


def _sorted_keys(keyed: dict[int, dict[str, np.ndarray]]) -> dict[int, np.ndarray] | None:
    """Each rank's kernel keys packed on one radix for the ranks given, in key order (None: too wide to pack)."""
    tables = [[k[c] for c in _KEY] for k in keyed.values()]
    lows, spans = _ranges(tables)
    out = {}
    for r, k in keyed.items():
        packed = _pack([k[c][k["order"]] for c in _KEY], lows, spans)
        if packed is None:
            return None
        out[r] = packed
    return out


def _member_rows(members: pd.DataFrame) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per rank: the gpu rows of its matched collectives and their ids."""
    if not len(members):
        return {}
    rank = members["rank"].to_numpy()
    o = np.argsort(rank, kind="stable")
    row, cid = members["row"].to_numpy(dtype=np.int64)[o], members["coll_id"].to_numpy(dtype=np.int64)[o]
    return {r: (row[sl], cid[sl]) for r, sl in _slices(rank[o]).items()}


def _member_wait(members: pd.DataFrame, ids: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """wait_ns of each (collective id, rank) asked for, as float (0 where the rank is not in it)."""
    all_ranks = np.unique(members["rank"].to_numpy())
    packed = members["coll_id"].to_numpy(dtype=np.int64) * len(all_ranks) + np.searchsorted(
        all_ranks, members["rank"].to_numpy())
    wait = members["wait_ns"].to_numpy(dtype=np.int64)
    if np.any(np.diff(packed) <= 0):
        o = np.argsort(packed, kind="stable")
        packed, wait = packed[o], wait[o]
    ri = np.clip(np.searchsorted(all_ranks, ranks), 0, len(all_ranks) - 1)
    q = np.where(all_ranks[ri] == ranks, ids * len(all_ranks) + ri, -1)
    pos = np.clip(np.searchsorted(packed, q), 0, len(packed) - 1)
    return np.where(packed[pos] == q, wait[pos].astype(float), 0.0)


def _same_kernels(a: dict[str, np.ndarray], b: dict[str, np.ndarray], ka: np.ndarray | None,
                  kb: np.ndarray | None) -> np.ndarray:
    """For each kernel of a the index of the same kernel in b (-1: none); keys are unique per rank.

    ka, kb: the packed keys in key order (_sorted_keys): one searchsorted of sorted into sorted.
    Without them, the keys of both are numbered together (_codes) and looked up.
    """
    na = len(a["start"])
    if ka is not None and kb is not None:
        if not len(kb):
            return np.full(na, -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(kb, ka), len(kb) - 1)
        out = np.empty(na, dtype=np.int64)
        out[a["order"]] = np.where(kb[pos] == ka, b["order"][pos], -1)
        return out
    cols = [np.concatenate([a[k], b[k]]) for k in _KEY]
    key, n = _codes(*cols)
    where_b = np.full(n, -1, dtype=np.int64)
    where_b[key[na:]] = np.arange(len(key) - na)
    return where_b[key[:na]]


def _first_compute(g: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step (sorted) of one role's kernels on both ranks: the first compute start on each."""
    steps, inv = np.unique(g["step"][g["compute"]], return_inverse=True)
    first_a = np.full(len(steps), np.iinfo(np.int64).max, dtype=np.int64)
    first_b = first_a.copy()
    np.minimum.at(first_a, inv, g["start_a"][g["compute"]])
    np.minimum.at(first_b, inv, g["start_b"][g["compute"]])
    return steps, first_a, first_b


def _order_check(ra: int, rb: int, sx: str, sy: str, n_x: int, n_y: int, ties: np.ndarray, hit: np.ndarray,
                 fx: tuple[np.ndarray, np.ndarray, np.ndarray], fy: tuple[np.ndarray, np.ndarray, np.ndarray],
                 cap: int) -> dict[str, Any]:
    """The evidence behind a verdict for one rank pair and stream-role pair, also when nothing
    was found: how many kernels were compared, how many started too close to judge, and per
    iteration which stream's first compute kernel started first on each rank
    (lead = first Y compute start - first X compute start; steps where a stream computes nothing
    are left out; the per-step lists are cut at cap)."""
    steps, ix, iy = np.intersect1d(fx[0], fy[0], assume_unique=True, return_indices=True)
    lead_a = fy[1][iy] - fx[1][ix]
    lead_b = fy[2][iy] - fx[2][ix]
    agree = np.sign(lead_a) == np.sign(lead_b)
    return {
        "rank_a": ra, "rank_b": rb, "stream_x": sx, "stream_y": sy,
        "kernels_x": int(n_x), "kernels_y": int(n_y),
        "near_ties": int(ties.sum()), "swapped": int(hit.sum()),
        "steps": int(len(steps)), "steps_same_first_stream": int(agree.sum()),
        # arrays, 8 bytes a value (written as lists): rank pairs x stream-role pairs x steps of them at many ranks
        "first_lead_ns_a": lead_a[:cap].astype(np.int64), "first_lead_ns_b": lead_b[:cap].astype(np.int64),
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
