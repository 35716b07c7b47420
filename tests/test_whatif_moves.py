"""Fixes that move work (analyzers/graph/moves.py): prefetch and coalesce on tiny hand-made graphs whose replays
were worked out by hand, the fixes' parsing, and the moves on the repository's FSDP and ring traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyzers.errors import BadInputError
from analyzers.graph.analysis import whatif
from analyzers.graph.fixes import parse_fix
from analyzers.graph.rank_graph import CAT_CODES
from tests.test_graph import US, _graph, _run, _us

ROOT = Path(__file__).resolve().parents[1]
C, M, K = CAT_CODES["compute"], CAT_CODES["comm"], CAT_CODES["copy"]


def _fsdp_rank(rank: int):
    """Copy-in A1 10 µs, all-gather AG1 50 µs (waits for A1), copy-out c1 1 µs (waits for AG1), block 1 100 µs;
    then the same for block 2: the all-gather of block 2 waits for its copy-in, behind block 1 on the compute
    stream. Everything launched at 0 (the host far ahead)."""
    return _graph(rank, start=[0, 10, 60, 61, 161, 171, 221, 222], end=[10, 60, 61, 161, 171, 221, 222, 322],
                  stream=[0, 1, 0, 0, 0, 1, 0, 0], prev=[-1, -1, 0, 2, 3, 1, 4, 6],
                  dep=[-1, 0, 1, -1, -1, 4, 5, -1], cat=[C, M, K, C, C, M, K, C], step=[1] * 8,
                  names=["copyin", "ncclDevKernel_AllGather", "copyout", "gemm", "copyin", "ncclDevKernel_AllGather",
                         "copyout", "gemm"])


def _fsdp_run():
    members = pd.DataFrame({"coll_id": [0, 0, 1, 1], "rank": [0, 1, 0, 1], "row": [1, 1, 5, 5]})
    return _run([_fsdp_rank(0), _fsdp_rank(1)], members)


def test_prefetch_issues_the_next_all_gather_behind_the_previous_consumer():
    run = _fsdp_run()
    assert run.replayed["dur_ns"].tolist() == [322 * US, 322 * US]
    # prefetch=1: copy-in A2 leaves the compute stream and waits only for c1 (ends 61): A2 61-71, AG2 71-121 under
    # block 1 (61-161); c2 follows block 1 (161-162), block 2 162-262
    _, rp = run.run([parse_fix("prefetch")])
    assert _us(rp.start[:8]) == [0, 10, 60, 61, 61, 71, 161, 162]
    assert _us(rp.end[:8]) == [10, 60, 61, 161, 71, 121, 162, 262]
    res = whatif(run, [parse_fix("prefetch")])
    assert res["predicted_step_ns"] == 262 * US and res["saving_ns"] == 60 * US
    assert any(n.startswith("prefetch: 4 all-gathers") for n in res["notes"])


def test_prefetch_deeper_than_the_step_moves_only_the_first():
    # prefetch=2: AG2 has no consumer two before it: its copy-in waits for what ran before it on the compute
    # stream (block 1), so only the stream it runs on changes: the step stays 322 µs
    run = _fsdp_run()
    assert whatif(run, [parse_fix("prefetch=2")])["predicted_step_ns"] == 322 * US


def test_prefetch_moves_nothing_without_recorded_waits():
    g = _graph(0, [0, 10], [10, 60], prev=[-1, -1], stream=[0, 1], cat=[C, M], step=[1, 1],
               names=["copyin", "ncclDevKernel_AllGather"])
    g1 = _graph(1, [0, 10], [10, 60], prev=[-1, -1], stream=[0, 1], cat=[C, M], step=[1, 1],
                names=["copyin", "ncclDevKernel_AllGather"])
    run = _run([g, g1], pd.DataFrame({"coll_id": [0, 0], "rank": [0, 1], "row": [1, 1]}))
    res = whatif(run, [parse_fix("prefetch")])
    assert res["predicted_step_ns"] == res["replayed_step_ns"]
    assert any("nothing moved" in n for n in res["notes"])


def test_coalesce_merges_each_send_with_its_receive():
    # rank 0 sends (30 µs) then receives; rank 1 receives (40 µs) then sends; the receive on rank 0 waits for
    # rank 1's send to start (140): both ranks end at 170. One kernel per exchange: rank 0's carries
    # max(30, 30), rank 1's max(40, 30) after the join at 100: 130 and 140
    names = ["gemm", "ncclDevKernel_SendRecv", "ncclDevKernel_SendRecv"]
    g0 = _graph(0, [0, 100, 130], [100, 130, 170], stream=[0, 1, 1], prev=[-1, -1, 1], dep=[-1, 0, -1],
                cat=[C, M, M], names=names, step=[1] * 3)
    g1 = _graph(1, [0, 100, 140], [100, 140, 170], stream=[0, 1, 1], prev=[-1, -1, 1], dep=[-1, 0, -1],
                cat=[C, M, M], names=names, step=[1] * 3)
    run = _run([g0, g1], pd.DataFrame({"coll_id": [0, 0, 1, 1], "rank": [0, 1, 0, 1], "row": [1, 1, 2, 2]}))
    assert run.replayed["dur_ns"].tolist() == [170 * US, 170 * US]
    res = whatif(run, [parse_fix("coalesce")])
    assert {p["rank"]: p["predicted_step_ns"] for p in res["per_rank"]} == {0: 130 * US, 1: 140 * US}
    assert any(n.startswith("coalesce: 1 point-to-point exchanges merged") for n in res["notes"])


@pytest.mark.parametrize("bad", ["prefetch=0", "prefetch=x", "prefetch=1.5", "coalesce=2"])
def test_bad_move_fixes(bad):
    with pytest.raises(BadInputError):
        parse_fix(bad)


def test_moves_on_the_repository_traces():
    """On the real traces the moves find what they move: every FSDP all-gather of the no-prefetch run (27 per
    rank) and the 6 ring exchanges of the uncoalesced ring, and the replay stays a replay (no step shorter
    than its compute alone)."""
    from analyzers.io.load import load_traces
    from analyzers.report import analyze

    run = analyze(load_traces([ROOT / "sample_traces/fsdp/zero2-no-prefetch"])).graph_run
    res = whatif(run, [parse_fix("prefetch")])
    assert any(n.startswith("prefetch: 54 all-gathers") for n in res["notes"])
    # front-loaded: the op tree ties each block's copy-out and compute to its all-gather; the moves close no cycle
    front = analyze(load_traces([ROOT / "sample_traces/fsdp/front-loaded"])).graph_run
    res = whatif(front, [parse_fix("prefetch")])
    note = next(n for n in res["notes"] if n.startswith("prefetch:"))
    assert "48 copy-outs moved" in note and "dropped" not in note
    assert res["predicted_step_ns"] < res["replayed_step_ns"]
    ring = analyze(load_traces([ROOT / "sample_traces/gemm-rs/ring-uncoalesced"])).graph_run
    res = whatif(ring, [parse_fix("coalesce")])
    assert any(n.startswith("coalesce: 6 point-to-point exchanges") for n in res["notes"])
    sg = ring.sg
    compute = np.asarray([(sg.end - sg.start)[(sg.cat == C) & (sg.rank_of == r) & (sg.step == 2)].sum()
                          for r in sg.ranks])
    assert res["predicted_step_ns"] < res["replayed_step_ns"] and res["predicted_step_ns"] > 0.5 * compute.max()


def test_module_roles_from_fsdp_ranges():
    """Launches inside FSDP's all_gather (M) and all_gather_copy_out (M) ranges take those roles; those between
    the end of pre_forward (M) and the start of post_forward (M) are M's forward; other threads and the
    unnamed root hooks are left alone."""
    from analyzers.graph.dataflow import COPY_OUT, FORWARD, GATHER, NONE, module_roles

    names = ["FSDP::all_gather (blocks.0)", "FSDP::all_gather_copy_out (blocks.0)", "FSDP::pre_forward (blocks.0)",
             "FSDP::post_forward (blocks.0)", "FSDP::pre_forward", "aten::mm"]
    ops = pd.DataFrame({"start_ns": [0, 100, 90, 300, 500, 150], "end_ns": [50, 120, 130, 310, 600, 160],
                        "name_id": [0, 1, 2, 3, 4, 5], "tid": [1, 1, 1, 1, 1, 1]})
    launch = np.asarray([10, 110, 150, 200, 305, 550, 200, -1])
    ltid = np.asarray([1, 1, 1, 1, 1, 1, 2, -1])
    role, module, modules = module_roles(ops, names, launch, ltid)
    assert modules == ["blocks.0"]
    assert role.tolist() == [GATHER, COPY_OUT, FORWARD, FORWARD, NONE, NONE, NONE, NONE]
    assert module.tolist() == [0, 0, 0, 0, -1, -1, -1, -1]
    assert module_roles(ops.iloc[:0], names, launch, ltid)[2] == []


def test_the_root_modules_all_gather_and_copy_out_are_its_own():
    """The root module's ranges name no module: launches in its all_gather and all_gather_copy_out ranges take
    the module (root); its forward window, which holds the blocks', gives nothing its role."""
    from analyzers.graph.dataflow import COPY_OUT, FORWARD, GATHER, NONE, ROOT, module_roles

    names = ["FSDP::all_gather", "FSDP::all_gather_copy_out", "FSDP::pre_forward", "FSDP::post_forward",
             "FSDP::pre_forward (blocks.0)", "FSDP::post_forward (blocks.0)"]
    ops = pd.DataFrame({"start_ns": [0, 20, 40, 400, 100, 200], "end_ns": [10, 30, 50, 410, 110, 210],
                        "name_id": [0, 1, 2, 3, 4, 5], "tid": [1] * 6})
    launch = np.asarray([5, 25, 60, 150, 300])  # root copy-in, root copy-out, root head, block 0, after block 0
    role, module, modules = module_roles(ops, names, launch, np.ones(5, dtype=np.int64))
    assert modules == [ROOT, "blocks.0"]
    assert role.tolist() == [GATHER, COPY_OUT, NONE, FORWARD, NONE]
    assert module.tolist() == [0, 0, -1, 1, -1]


def test_prefetch_front_loaded_from_the_op_tree_at_dim_4096():
    """Front-loaded -> zero2 recorded at dim 4096 (benchmarks/recordings/fsdp-dim4096), read without its
    Execution Traces: the root module's all-gather is tied to its copy-in and copy-out by its unnamed ranges,
    every all-gather moves by FSDP's module ranges, no wait closes a cycle, and the prediction is within 10 % of
    the zero2 run's measured step (taking the last block's copy-out for the root's copy-in chained every block
    behind it: 256 ms predicted against 151 ms)."""
    from analyzers.io.load import load_traces
    from analyzers.report import analyze

    rec = ROOT / "benchmarks/recordings/fsdp-dim4096/fsdp"
    front = analyze(load_traces([rec / "front-loaded"])).graph_run
    res = whatif(front, [parse_fix("prefetch")])
    note = next(n for n in res["notes"] if n.startswith("prefetch:"))
    assert "54 all-gathers" in note and "FSDP module ranges: 54)" in note and "dropped" not in note
    fixed = analyze(load_traces([rec / "zero2"])).critical_path["fidelity"]["measured_step_ns"]
    assert abs(res["predicted_step_ns"] / fixed - 1) < 0.10


def test_comm_first_dispatches_the_communication_before_the_gemm():
    # a GEMM (100 µs, stream 0) fills the GPU; a communication kernel (20 µs, stream 1) launched with it could
    # start only in the GEMM's tail (an inferred edge: 10 µs before its end). Dispatched first, it runs beside
    # the GEMM from 0: the step ends with the GEMM at 100 instead of 110
    g = _graph(0, [0, 90], [100, 110], stream=[0, 1], dep=[-1, 0], cat=[C, M], step=[1, 1])
    g.dep_lat[1] = -10 * US
    run = _run([g])
    assert run.replayed["dur_ns"].tolist() == [110 * US]
    res = whatif(run, [parse_fix("comm-first")])
    assert res["predicted_step_ns"] == 100 * US
    assert any(n.startswith("comm-first: 1 communication kernels dispatched") for n in res["notes"])


def test_agreed_order_puts_every_rank_in_the_leaders_stream_order():
    # each rank runs GEMMs A (stream 0) and B (stream 1) one at a time, then C (stream 0) after collective X, which
    # follows A on stream 0; Y follows B on stream 1. Rank 0 runs A first, rank 1 B first: X waits for rank 1's A
    # (arrival 200), C runs 210-260 on both. In rank 0's order X arrives at 100 on both, C runs after B: 200-250
    c, m = C, M
    g0 = _graph(0, [0, 100, 100, 200, 210], [100, 200, 210, 210, 260], stream=[0, 1, 0, 1, 0], prev=[-1, -1, 0, 1, 2],
                cat=[c, c, m, m, c], step=[1] * 5)
    g1 = _graph(1, [100, 0, 200, 100, 210], [200, 100, 210, 210, 260], stream=[0, 1, 0, 1, 0], prev=[-1, -1, 0, 1, 2],
                cat=[c, c, m, m, c], step=[1] * 5)
    members = pd.DataFrame({"coll_id": [0, 0, 1, 1], "rank": [0, 1, 0, 1], "row": [2, 2, 3, 3]})
    run = _run([g0, g1], members)
    assert run.replayed["dur_ns"].tolist() == [260 * US, 260 * US]
    res = whatif(run, [parse_fix("agreed-order")])
    assert {p["rank"]: p["predicted_step_ns"] for p in res["per_rank"]} == {0: 250 * US, 1: 250 * US}
    assert any(n.startswith("agreed-order: 1 rank-steps run") for n in res["notes"])


@pytest.mark.parametrize("fix", ["prefetch", "coalesce", "comm-first", "agreed-order"])
def test_a_move_that_moves_nothing_replays_the_unfixed_graph(fix):
    """ag-gemm sync-in-loop has no all-gather with a copy-in, no point-to-point pair, no communication held in a
    GEMM's tail and one order of streams on both ranks: the moved graph's replay is the unfixed one, step by step."""
    from analyzers.io.load import load_traces
    from analyzers.report import analyze

    run = analyze(load_traces([ROOT / "sample_traces/ag-gemm/sync-in-loop"])).graph_run
    res = whatif(run, [parse_fix(fix)])
    assert [s["predicted_ns"] for s in res["per_step"]] == [s["replayed_ns"] for s in res["per_step"]]


def test_fsdp_pairs_at_dim_4096_meet_the_target_with_their_execution_traces():
    """The three FSDP pairs recorded where the GPU sets the step (benchmarks/recordings/fsdp-dim4096), each
    unfixed set replayed with its Execution Traces under `prefetch`: every prediction within 10 % of the fixed
    variant's measured step, the median within 5 % (measured -1.4, -2.3, -7.1 %). The same pairs at dim 2048,
    where the host sets the step, miss it (sample_traces/fsdp: zero3 -17.4 %)."""
    from analyzers.io.exec_trace import read_exec_traces
    from analyzers.io.load import load_traces
    from analyzers.report import analyze, graph_run

    rec = ROOT / "benchmarks/recordings/fsdp-dim4096/fsdp"
    measured = {v: analyze(load_traces([rec / v])).critical_path["fidelity"]["measured_step_ns"]
                for v in ("zero2", "zero3")}
    errors = []
    for unfixed, fixed in (("front-loaded", "zero2"), ("zero2-no-prefetch", "zero2"), ("zero3-no-prefetch", "zero3")):
        ets = read_exec_traces(sorted((rec / unfixed).glob("rank*.et.json.gz")))
        run = graph_run(load_traces([rec / unfixed]), None, ets)
        res = whatif(run, [parse_fix("prefetch")])
        assert any("from the Execution Trace" in n for n in res["notes"])
        errors.append(abs(res["predicted_step_ns"] / measured[fixed] - 1))
    assert max(errors) < 0.10 and float(np.median(errors)) <= 0.05, errors
