"""The agreed-order fix's GEMM tails (analyzers/graph/agreed_order.py) on a hand-made graph worked out by hand."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from analyzers.graph.agreed_order import compute_tails
from analyzers.graph.analysis import whatif
from analyzers.graph.fixes import parse_fix
from analyzers.graph.rank_graph import CAT_CODES
from analyzers.timeline.sm_resources import RES_COLUMNS
from tests.test_graph import US, _graph, _run

C, M = CAT_CODES["compute"], CAT_CODES["comm"]


def _rank(rank: int, first_stream: int):
    """Two GEMMs of one kernel (100 µs each, streams 0 and 1), the second starting 5 µs before the first's end
    (an inferred wait in its tail), each followed on its stream by a 10 µs collective (X on stream 0, Y on 1)."""
    a, b = (0, 1) if first_stream == 0 else (1, 0)  # rows of the stream-0 and stream-1 GEMMs
    start, end = [0, 0, 0, 0], [0, 0, 0, 0]
    start[a], end[a], start[b], end[b] = 0, 100, 95, 195
    start[2], end[2] = end[0], end[0] + 10  # X after the stream-0 GEMM
    start[3], end[3] = end[1], end[1] + 10  # Y after the stream-1 GEMM
    dep = [-1, -1, -1, -1]
    dep[b] = a
    g = _graph(rank, start, end, stream=[0, 1, 0, 1], prev=[-1, -1, 0, 1], dep=dep, cat=[C, C, M, M], step=[1] * 4,
               names=["gemm", "gemm", "x", "y"])
    g.dep_lat[b] = -5 * US
    # a GEMM's block per SM (384 threads × 168 registers) leaves no room for another's: it starts as blocks retire
    facts = {"device": 0, "sms": 132, "regs": 65536, "smem": 233472, "threads": 2048, "max_blocks": 32, "blocks": 132,
             "block_threads": 384, "thread_regs": 168, "block_smem": 200_000}
    res = np.asarray([[facts[c] for c in RES_COLUMNS]], dtype=np.int64)
    return replace(g, res_id=np.array([0, 0, -1, -1], dtype=np.int32), res=res)


def test_the_reordered_gemm_starts_in_the_tail_of_the_one_before_it():
    # rank 0 runs stream 0's GEMM first, rank 1 stream 1's: X waits for rank 1's second GEMM (195), Y for rank 0's
    # (195): both end at 205. In rank 0's order rank 1's stream-1 GEMM follows its stream-0 one; it starts in its
    # 5 µs tail (95-195), as both ranks' traces show: X runs 100-110 and Y ends at 205 again (at the first
    # GEMM's end, 210)
    run = _run([_rank(0, 0), _rank(1, 1)],
               pd.DataFrame({"coll_id": [0, 0, 1, 1], "rank": [0, 1, 0, 1], "row": [2, 2, 3, 3]}))
    assert compute_tails(run.sg).tolist() == [5 * US, 5 * US, 0, 0] * 2
    assert run.replayed["dur_ns"].tolist() == [205 * US, 205 * US]
    inp, rp = run.run([parse_fix("agreed-order")])
    r1 = run.sg.base[1]
    assert (np.asarray(rp.start[r1:r1 + 4]) / US).tolist() == [0, 95, 100, 195]
    res = whatif(run, [parse_fix("agreed-order")])
    assert res["predicted_step_ns"] == 205 * US
    # without the kernels' resources nothing says the second GEMM waited for the first's blocks: no tail
    unknown = np.zeros(0, dtype=np.int32)
    bare = _run([replace(_rank(0, 0), res_id=unknown), replace(_rank(1, 1), res_id=unknown)],
                pd.DataFrame({"coll_id": [0, 0, 1, 1], "rank": [0, 1, 0, 1], "row": [2, 2, 3, 3]}))
    assert not compute_tails(bare.sg).any()
    note = next(n for n in res["notes"] if n.startswith("agreed-order:"))
    assert "1 of their kernels start in the tail" in note


def _three_steps(rank: int) -> object:
    """GEMMs P (stream 0, step 1), A (stream 0) and B (stream 1, step 2), Q (stream 1, step 3), 100 µs each, one at a
    time. Rank 0 runs B before A; rank 1 A before B, with a memset ahead of B on stream 1 inferred to start with A
    (its wait on A at -100 µs: A's start)."""
    S = CAT_CODES["memset"]
    if rank == 0:  # rows P, B, A, Q
        return _graph(0, [0, 100, 200, 300], [100, 200, 300, 400], stream=[0, 1, 0, 1], prev=[-1, -1, 0, 1],
                      cat=[C] * 4, step=[1, 2, 2, 3])
    # rows P, A, memset, B, Q
    g = _graph(1, [0, 100, 100, 200, 300], [100, 200, 100, 300, 400], stream=[0, 0, 1, 1, 1], prev=[-1, 0, -1, 2, 3],
               dep=[-1, -1, 1, -1, -1], cat=[C, C, S, C, C], step=[1, 2, 2, 2, 3])
    g.dep_lat[2] = -100 * US
    return g


def test_a_reordered_step_stays_after_the_step_before_it_and_before_the_next():
    # rank 1 in rank 0's order: B, then A. B waits for P (the kernel before the step, on the other stream), the
    # memset that waited for A (now after it) waits for P too, Q (after B on its stream) waits for A, the step's new
    # last: P 0-100, memset at 100, B 100-200, A 200-300, Q 300-400, as on rank 0. Before, B and the memset had no
    # wait left: the memset ran at 0 and opened step 2 there, B ran beside P, and Q beside A
    run = _run([_three_steps(0), _three_steps(1)])
    assert run.replayed["dur_ns"].tolist() == [100 * US, 200 * US, 100 * US] * 2  # rank 0's steps, then rank 1's
    inp, rp = run.run([parse_fix("agreed-order")])
    r1 = run.sg.base[1]
    assert (np.asarray(rp.start[r1:r1 + 5]) / US).tolist() == [0, 200, 100, 100, 300]
    res = whatif(run, [parse_fix("agreed-order")])
    assert [(s["step"], s["predicted_ns"] // US) for s in res["per_step"]] == [(1, 100), (2, 200), (3, 100)]
    note = next(n for n in res["notes"] if n.startswith("agreed-order:"))
    assert "1 of their steps' other activities that waited for a kernel now run after them" in note
