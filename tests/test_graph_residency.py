"""SM residency: a communication kernel that cannot fit beside a GPU-filling compute kernel waits for its
blocks to retire. Hand-made resource tables and graphs whose answers were worked out by hand, the
look-alikes that must not be held back, and both loaders' resource columns on the real traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analyzers.graph.analysis import whatif
from analyzers.graph.fixes import Fix
from analyzers.graph.rank_graph import CAT_CODES
from analyzers.graph.residency import blocked_matrix, residency
from analyzers.io.load import load_traces
from analyzers.timeline.sm_resources import RES_COLUMNS, dims_product, kernel_resources
from tests.test_graph import US, _graph, _run

ROOT = Path(__file__).resolve().parents[1]
# an SM of a Hopper GPU; a 4-SM GPU keeps the grids small
LIMITS = dict(device=0, sms=4, regs=65536, smem=233472, threads=2048, max_blocks=32)
GEMM = dict(blocks=4, block_threads=384, thread_regs=168, block_smem=213188)  # cuBLAS's persistent nvjet
NCCL = dict(blocks=2, block_threads=544, thread_regs=96, block_smem=103808)  # NCCL's all-gather
TINY = dict(blocks=1, block_threads=32, thread_regs=16, block_smem=0)  # a one-warp flag kernel


def _table(*kernels: dict) -> np.ndarray:
    return np.asarray([[{**LIMITS, **k}[c] for c in RES_COLUMNS] for k in kernels], dtype=np.int64)


def test_blocked_by_a_persistent_gemm_worked_by_hand():
    # GEMM: 12 warps x ceil(168*32/256)*256 = 5376 registers = 64512 a block: 1 resident block an SM, which
    # leaves 1024 registers, 20284 B of shared memory, 1664 threads. NCCL needs 17 x 3072 = 52224 registers
    # and 103808 B: it does not fit. The flag kernel (1 warp x 512 registers, no shared memory) does.
    fills, blocked = blocked_matrix(_table(GEMM, NCCL, TINY, {**GEMM, "blocks": 2}))
    assert fills.tolist() == [True, False, False, False]  # a 2-block grid leaves 2 of 4 SMs empty
    assert blocked[1, 0] and not blocked[2, 0]
    assert not blocked[:, 1:].any()  # only a filling kernel holds anything back
    # the same kernels on another device never block each other
    other = _table(GEMM, NCCL)
    other[1, 0] = 1
    assert not blocked_matrix(other)[1][1, 0]


def _serialized(comm: dict | None, names=None, **kw):
    """GEMM K (0..100 µs, stream 0) then comm X (stream 1) launched at 0 but made to wait for K by an event,
    both in step 1: measured X at 100..130."""
    g = _graph(0, [0, 100], [100, 130], stream=[0, 1], dep=[-1, 0], cat=[CAT_CODES["compute"], CAT_CODES["comm"]],
               step=[1, 1], names=names, **kw)
    if comm is not None:
        g.res, g.res_id = _table(GEMM, comm), np.array([0, 1], dtype=np.int32)
    return g


def test_removed_wait_still_waits_for_the_gemm_to_release_its_sms():
    run = _run([_serialized(NCCL)])
    # the event wait removed: X is ready at 0 but cannot get an SM until K ends at 100: nothing gained
    assert whatif(run, [Fix("serialized-streams")])["predicted_step_ns"] == 130 * US
    assert run.replayed["dur_ns"].iloc[0] == 130 * US


@pytest.mark.parametrize("comm", [TINY, None])
def test_lookalikes_run_beside_the_gemm(comm):
    # a comm kernel that fits beside the GEMM's blocks, or one whose resources the trace does not give:
    # without the wait it runs at once, the step is K's 100 µs
    run = _run([_serialized(comm)])
    assert whatif(run, [Fix("serialized-streams")])["predicted_step_ns"] == 100 * US
    notes = residency(run.sg).notes
    assert bool(notes) == (comm is None)


def test_release_before_the_end_seen_in_the_trace():
    # K1 (0..100) with X1 launched at 90 that started at 90, inside K1: K's blocks released SMs 10 µs before
    # its end. K2 (same kernel, 130..230) and X2, serialized on it (230..260). Without the wait X2 (launched
    # at 140) gets SMs at K2's end less 10 µs: 220..250
    g = _graph(0, [0, 90, 130, 230], [100, 120, 230, 260], stream=[0, 1, 0, 1], prev=[-1, -1, 0, 1],
               dep=[-1, -1, -1, 2], off=[0, 90, 130, 140], cat=[0, 1, 0, 1], step=[1, 1, 1, 1],
               names=["gemm", "nccl", "gemm", "nccl"])
    g.res, g.res_id = _table(GEMM, NCCL), np.array([0, 1, 0, 1], dtype=np.int32)
    run = _run([g])
    rs = residency(run.sg)
    assert rs.tail[[0, 2]].tolist() == [10 * US, 10 * US] and rs.holder.tolist() == [True, False, True, False]
    assert run.replayed["dur_ns"].iloc[0] == 260 * US  # the measured timeline replays as measured
    assert whatif(run, [Fix("serialized-streams")])["predicted_step_ns"] == 250 * US


def test_dims_product_reads_only_lists_of_positive_ints():
    got = dims_product([[2, 66, 1], [544, 1, 1], None, [0, 1, 1], ["2", 1, 1], [1, 2, 3, 4], 7, [1.0, 2, 2]])
    assert got.tolist() == [132, 544, -1, -1, -1, -1, -1, 4]


@pytest.mark.parametrize("folder", ["ag-gemm/sync-before-loop", "ag-gemm-nsys/sync-before-loop"])
def test_both_loaders_give_the_kernels_resources(folder):
    # the same runner on 2 x H200 (132 SMs) under torch.profiler and Nsight Systems: the same figures
    trace = load_traces([ROOT / "sample_traces" / folder]).ranks[0]
    assert trace.meta["sm_limits"]["0"] == {"sms": 132, "regs": 65536, "smem": 233472, "threads": 2048, "blocks": 32}
    gpu = trace.gpu
    names = trace.names_of(gpu["name_id"].to_numpy())
    gemm = gpu[[n.startswith("nvjet") for n in names]]
    nccl = gpu[[n.startswith("ncclDevKernel_AllGather") for n in names]]
    assert set(map(tuple, gemm[["blocks", "threads", "regs", "smem"]].to_numpy().tolist())) == {(132, 384, 168, 213188)}
    assert set(map(tuple, nccl[["blocks", "threads", "regs", "smem"]].to_numpy().tolist())) == {(24, 544, 96, 103808)}
    assert (gpu.loc[gpu["kind"] != "kernel", ["blocks", "threads", "regs", "smem"]] == -1).all().all()
    res_id, table = kernel_resources(trace)
    assert (res_id[gpu["kind"].to_numpy() == "kernel"] >= 0).all() and len(table) == 2


def test_the_covering_holder_is_the_one_that_ends_last_not_the_last_to_start():
    from analyzers.graph.residency import _running

    # holder 0 runs 0..100 on one stream, holders 1-3 short ones on another: at 12, 22 and 40 it is holder 0
    # that still holds the SMs; before anything started, none
    start, end = np.array([0, 10, 20, 30]), np.array([100, 15, 25, 35])
    assert _running(start, end, np.arange(4), np.array([5, 12, 22, 40, -1])).tolist() == [0, 0, 0, 0, -1]
    assert _running(start, end, np.arange(0), np.array([5])).tolist() == [-1]
