"""RangeIndex (analyzers/syncs/nesting.py) against the per-depth merge_asof joins it replaced.

The reference below is the previous implementation, kept verbatim as the contract: on any ranges,
nested or not, with ties, exclusions and subsets, the sorted-once index gives the same answers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzers.syncs.nesting import RangeIndex, innermost_any_thread, innermost_enclosing, nesting_depth


def ref_nesting_depth(start: np.ndarray, end: np.ndarray, tid: np.ndarray) -> np.ndarray:
    n = start.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    t = np.concatenate([start, end])
    th = np.concatenate([tid, tid])
    d = np.concatenate([np.ones(n, dtype=np.int64), -np.ones(n, dtype=np.int64)])
    length_key = np.concatenate([-(end - start), np.zeros(n, dtype=np.int64)])
    idx = np.concatenate([np.arange(n), np.full(n, -1)])
    order = np.lexsort((length_key, d, t, th))
    th_o, d_o, idx_o = th[order], d[order], idx[order]
    running = np.cumsum(d_o)
    first = np.r_[True, th_o[1:] != th_o[:-1]]
    base = np.maximum.accumulate(np.where(first, np.arange(th_o.size), 0))
    before = np.r_[0, running[:-1]]
    open_before = before - before[base]
    depth = np.zeros(n, dtype=np.int64)
    is_start = idx_o >= 0
    depth[idx_o[is_start]] = np.maximum(open_before[is_start], 0)
    return depth


def ref_innermost_enclosing(q_start, q_end, q_tid, r_start, r_end, r_tid, q_exclude=None):
    nq = q_start.size
    out = np.full(nq, -1, dtype=np.int64)
    if nq == 0 or r_start.size == 0:
        return out
    depth = ref_nesting_depth(r_start, r_end, r_tid)
    exclude = q_exclude if q_exclude is not None else np.full(nq, -1, dtype=np.int64)
    queries = pd.DataFrame({"t": q_start.astype(np.int64), "tid": q_tid.astype(np.int64), "q": np.arange(nq)})
    queries = queries.sort_values("t", kind="stable")
    for d in range(int(depth.max()) + 1):
        at = np.flatnonzero(depth == d)
        if at.size == 0:
            continue
        ranges = pd.DataFrame({"t": r_start[at].astype(np.int64), "tid": r_tid[at].astype(np.int64), "r": at})
        ranges = ranges.sort_values("t", kind="stable")
        hit = pd.merge_asof(queries, ranges, on="t", by="tid", direction="backward")
        r = hit["r"].to_numpy(dtype=np.float64)
        q = hit["q"].to_numpy()
        ok = ~np.isnan(r)
        ri = np.where(ok, r, 0).astype(np.int64)
        ok &= (r_end[ri] >= q_end[q]) & (ri != exclude[q])
        out[q[ok]] = ri[ok]
    return out


def ref_innermost_any_thread(q_start, q_end, r_start, r_end, r_tid, q_exclude=None):
    nq = q_start.size
    out = np.full(nq, -1, dtype=np.int64)
    threads = np.unique(r_tid)
    if nq == 0 or threads.size == 0:
        return out
    qs = np.repeat(q_start, threads.size)
    qe = np.repeat(q_end, threads.size)
    qt = np.tile(threads, nq)
    ex = np.repeat(q_exclude, threads.size) if q_exclude is not None else None
    hit = ref_innermost_enclosing(qs, qe, qt, r_start, r_end, r_tid, ex)
    owner = np.repeat(np.arange(nq), threads.size)
    found = hit >= 0
    if not found.any():
        return out
    depth = ref_nesting_depth(r_start, r_end, r_tid)
    cand = pd.DataFrame({"q": owner[found], "r": hit[found], "d": depth[hit[found]], "s": r_start[hit[found]]})
    best = cand.sort_values(["q", "d", "s"], kind="stable").drop_duplicates("q", keep="last")
    out[best["q"].to_numpy()] = best["r"].to_numpy()
    return out


def ref_enclosing(start, end, tid, own, o_start, o_end, o_tid, mask, any_thread):
    """blocking_syncs' former per-subset join (local indices, then back to host-op rows)."""
    sel = np.flatnonzero(mask)
    if sel.size == 0:
        return np.full(start.size, -1, dtype=np.int64)
    local = pd.Series(np.arange(sel.size), index=sel).reindex(own).fillna(-1).to_numpy(np.int64)
    idx = ref_innermost_enclosing(start, end, tid, o_start[sel], o_end[sel], o_tid[sel], local)
    if any_thread and (idx < 0).any():
        miss = np.flatnonzero(idx < 0)
        idx[miss] = ref_innermost_any_thread(start[miss], end[miss], o_start[sel], o_end[sel], o_tid[sel],
                                             local[miss])
    return np.where(idx >= 0, sel[np.clip(idx, 0, sel.size - 1)], -1)


@st.composite
def ranges_and_queries(draw):
    """Ranges that may nest, overlap partly, repeat or touch (small times force ties), on a few
    threads; queries on those threads and on one the ranges lack; exclusions; a subset mask."""
    n = draw(st.integers(0, 40))
    s = np.array(draw(st.lists(st.integers(0, 30), min_size=n, max_size=n)), dtype=np.int64)
    ln = np.array(draw(st.lists(st.integers(0, 15), min_size=n, max_size=n)), dtype=np.int64)
    tid = np.array(draw(st.lists(st.sampled_from([3, 7, 11]), min_size=n, max_size=n)), dtype=np.int64)
    nq = draw(st.integers(0, 12))
    qs = np.array(draw(st.lists(st.integers(0, 40), min_size=nq, max_size=nq)), dtype=np.int64)
    ql = np.array(draw(st.lists(st.integers(0, 8), min_size=nq, max_size=nq)), dtype=np.int64)
    qt = np.array(draw(st.lists(st.sampled_from([3, 7, 11, 5]), min_size=nq, max_size=nq)), dtype=np.int64)
    ex = np.array(draw(st.lists(st.integers(-1, max(n - 1, -1)), min_size=nq, max_size=nq)), dtype=np.int64)
    mask = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    return s, s + ln, tid, qs, qs + ql, qt, ex, mask


@settings(max_examples=200, deadline=None)
@given(ranges_and_queries())
def test_range_index_matches_the_per_depth_joins(data):
    rs, re_, rt, qs, qe, qt, ex, mask = data
    assert np.array_equal(nesting_depth(rs, re_, rt), ref_nesting_depth(rs, re_, rt))
    assert np.array_equal(innermost_enclosing(qs, qe, qt, rs, re_, rt),
                          ref_innermost_enclosing(qs, qe, qt, rs, re_, rt))
    local_ex = np.where(ex < rs.size, ex, -1)
    assert np.array_equal(innermost_enclosing(qs, qe, qt, rs, re_, rt, local_ex),
                          ref_innermost_enclosing(qs, qe, qt, rs, re_, rt, local_ex))
    assert np.array_equal(innermost_any_thread(qs, qe, rs, re_, rt, local_ex),
                          ref_innermost_any_thread(qs, qe, rs, re_, rt, local_ex))
    if rs.size:
        index = RangeIndex(rs, re_, rt)
        sub = ref_nesting_depth(rs[mask], re_[mask], rt[mask])
        assert np.array_equal(index.depth(mask)[mask], sub)
        for any_thread in (False, True):
            got = index.innermost(qs, qe, qt, ex, mask=mask, any_thread=any_thread)
            want = ref_enclosing(qs, qe, qt, ex, rs, re_, rt, mask, any_thread)
            assert np.array_equal(got, want)
