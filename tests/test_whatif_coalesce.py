"""The coalesce fix's kernel model (analyzers/graph/coalesce.py): NCCL's warp split, the link-plus-warps time of
one kernel carrying both directions, worked out by hand, and the model against the repository's coalesced ring."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from analyzers.graph.analysis import whatif
from analyzers.graph.coalesce import coalesced_ns, nccl_p2p_warps
from analyzers.graph.fixes import parse_fix
from analyzers.graph.rank_graph import CAT_CODES
from analyzers.timeline.sm_resources import RES_COLUMNS
from tests.test_graph import US, _graph, _run

ROOT = Path(__file__).resolve().parents[1]
C, M = CAT_CODES["compute"], CAT_CODES["comm"]


def test_nccl_warp_split():
    # 640 threads: 20 warps; a pair gets 10 send + 9 receive, a lone direction all 19 of them; 128 threads:
    # 4 warps, 2 + 2; unknown block size: none
    alone, recv = nccl_p2p_warps(np.array([640, 128, -1]))
    assert alone.tolist() == [19, 4, 0] and recv.tolist() == [9, 2, 0]


def test_coalesced_kernel_by_hand():
    # 45 MB at 450 GB/s: 100 µs on the link. A 190 µs transfer: 100 + 90 × 19/9 = 290 µs; a 145 µs one:
    # 100 + 45 × 19/9 = 195 µs; the kernel takes the longer, 290 µs
    dur, ok = coalesced_ns([190_000], [145_000], [45_000_000], [45_000_000], [450.0], [640])
    assert dur.tolist() == [290_000] and ok.tolist() == [True]
    # transfers at the link's peak are not slowed: 90 MB measured in 190 µs (200 µs at the peak: taken as all link)
    # and 45 MB in 100 µs; the kernel takes 190 µs
    dur, _ = coalesced_ns([190_000], [100_000], [90_000_000], [45_000_000], [450.0], [640])
    assert dur.tolist() == [190_000]
    # unknown link peak, message size or block size: the longer transfer, unmodelled
    dur, ok = coalesced_ns([190_000] * 3, [145_000] * 3, [45_000_000, -1, 45_000_000], [45_000_000] * 3,
                           [0.0, 450.0, 450.0], [640, 640, -1])
    assert dur.tolist() == [190_000] * 3 and ok.tolist() == [False] * 3


def _ring_rank(rank: int, recv_us: int):
    """A 100 µs GEMM, then a send and a receive back to back on the communication stream (9 MB each: 20 µs on a
    450 GB/s link), 4-warp blocks."""
    names = ["gemm", "ncclDevKernel_SendRecv", "ncclDevKernel_SendRecv"]
    end = [100, 100 + recv_us, 170]
    g = _graph(rank, [0, 100, end[1]], end, stream=[0, 1, 1], prev=[-1, -1, 1], dep=[-1, 0, -1], cat=[C, M, M],
               names=names, step=[1] * 3)
    facts = {"device": 0, "sms": 132, "regs": 65536, "smem": 233472, "threads": 2048, "max_blocks": 32, "blocks": 16,
             "block_threads": 128, "thread_regs": 32, "block_smem": 0}
    res = np.asarray([[facts[c] for c in RES_COLUMNS]], dtype=np.int64)
    return replace(g, msg_bytes=np.array([-1, 9_000_000, 9_000_000]), link_gbps=450.0,
                   res_id=np.array([-1, 0, 0], dtype=np.int32), res=res)


def test_coalesce_carries_both_directions_on_half_the_warps():
    # rank 0 sends 30 µs then receives; rank 1 receives 40 µs then sends (30 µs after the join). Merged after
    # the join at 100: each direction is 20 µs on the link and the rest on 2 of 4 warps (twice as long): rank 0
    # 20 + 10 × 2 = 40 µs (ends 140), rank 1 max(20 + 20 × 2, 20 + 10 × 2) = 60 µs (ends 160)
    run = _run([_ring_rank(0, 30), _ring_rank(1, 40)],
               pd.DataFrame({"coll_id": [0, 0, 1, 1], "rank": [0, 1, 0, 1], "row": [1, 1, 2, 2]}))
    assert run.replayed["dur_ns"].tolist() == [170 * US, 170 * US]
    res = whatif(run, [parse_fix("coalesce")])
    assert {p["rank"]: p["predicted_step_ns"] for p in res["per_rank"]} == {0: 140 * US, 1: 160 * US}
    note = next(n for n in res["notes"] if n.startswith("coalesce:"))
    assert "2 of 4 per direction" in note and "optimistic" not in note


def test_coalesced_kernels_against_the_coalesced_ring():
    """The modelled kernels of the uncoalesced ring (the exchanges that ran alone) against the coalesced ring's
    measured transfers (those that ran alone): medians within 5 % (299.2 against 289.1 µs when written; the longer
    transfer, the model before, 220.4 µs)."""
    from analyzers.graph.contention import F_ALONE, overlap_shares
    from analyzers.graph.fixes import baseline_inputs
    from analyzers.graph.moves import apply_moves
    from analyzers.io.load import load_traces
    from analyzers.report import analyze

    def p2p_alone(sg, dur):
        names = np.concatenate([np.asarray(sg.graphs[r].names, dtype=object)[sg.graphs[r].name_id] for r in sg.ranks])
        sendrecv = np.asarray(["SendRecv" in str(n) for n in names]) & (dur > 0)
        return sendrecv & (overlap_shares(sg, sg.start, sg.end, baseline_inputs(sg).dur) < F_ALONE)

    sg = analyze(load_traces([ROOT / "sample_traces/gemm-rs/ring-uncoalesced"])).graph_run.sg
    moved = apply_moves(sg, [parse_fix("coalesce")])
    modelled = moved.inputs.dur[p2p_alone(sg, moved.inputs.dur)]
    ring = analyze(load_traces([ROOT / "sample_traces/gemm-rs/ring"])).graph_run.sg
    measured = ring.transfer[p2p_alone(ring, ring.transfer)]
    assert len(modelled) >= 4 and len(measured) >= 4
    assert abs(np.median(modelled) / np.median(measured) - 1) < 0.05


def test_link_facts_from_the_gpu_table_and_the_gpu_model():
    from analyzers.graph.link_facts import message_bytes, rank_link_gbps

    # 33554432 bfloat16 elements: 64 MiB; 10 floats: 40 bytes; unknown dtype or count: -1
    gpu = pd.DataFrame({"msg_nelems": [33554432, 10, 10, -1], "dtype": ["BFloat16", "Float", "", "Float"]})
    assert message_bytes(gpu).tolist() == [64 << 20, 40, -1, -1]
    assert message_bytes(pd.DataFrame({"start_ns": [0]})).tolist() == [-1]
    # the slowest known model of the rank's GPUs (H200: 450, A100 SXM: 300 GB/s per direction); none known: 0
    assert rank_link_gbps({0: "NVIDIA H200", 1: "NVIDIA A100-SXM4-80GB"}) == 300.0
    assert rank_link_gbps({0: "a GPU nobody lists"}) == 0.0 and rank_link_gbps({}) == 0.0
