"""PyTorch's Execution Trace as a source of data dependencies (`whatif --et`), and NVTX ranges in nsys exports
as the source of FSDP's module roles.

tests/data/et/ag-gemm is a real recording: `overlapscope run ag-gemm --variant sync-before-loop --nproc 2` on
CPU (gloo), which records each rank's Kineto trace and, on a step of its own before the profiled ones, its
Execution Trace: per step 4 all-gathers (torch's _allgather_base_), each read by the matmul after it.
benchmarks/recordings/fsdp-et holds FSDP2 runs on 2xH200 with theirs (9 all-gathers a step: the root module's
and 8 blocks', each with FSDP's copy-in and copy-out)."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from analyzers.errors import BadInputError
from analyzers.graph.dataflow import COPY_OUT, FORWARD, GATHER, NONE
from analyzers.graph.et_roles import _windows
from analyzers.graph.rank_graph import CAT_CODES, build_rank_graph
from analyzers.io.exec_trace import ExecTrace, check_exec_ranks, read_exec_trace, read_exec_traces
from analyzers.io.load import load_traces
from analyzers.report import graph_run
from analyzers.syncs.blocking import blocking_syncs

from .trace_files import Nsys

ROOT = Path(__file__).resolve().parents[1]
AG = ROOT / "tests" / "data" / "et" / "ag-gemm"
FSDP = ROOT / "benchmarks" / "recordings" / "fsdp-et" / "fsdp" / "zero2-no-prefetch"
GATHER_OP, MATMUL = "c10d::_allgather_base_", "aten::matmul"


def test_each_all_gather_is_read_by_the_matmul_after_it():
    et = read_exec_trace(AG / "rank0.et.json.gz")
    assert et.rank == 0 and et.pid > 0
    # the runner's step: all-gather slice s into a buffer, then matmul on it, for s = 0..3
    assert [(lk.collective, lk.consumer) for lk in et.links] == [((GATHER_OP, s), (MATMUL, s)) for s in range(4)]
    assert all(lk.gather and lk.producer is None and lk.copy_outs == () for lk in et.links)  # the shard is a view
    assert et.counts == {MATMUL: 4, GATHER_OP: 4}


def test_fsdp_all_gathers_have_copy_in_copy_out_and_the_module_compute():
    et = read_exec_trace(FSDP / "rank0.et.json.gz")
    gathers = [lk for lk in et.links if lk.gather]
    assert len(gathers) == 9 and all(lk.consumer is not None for lk in gathers)
    assert [lk.producer for lk in gathers] == [("fsdp::all_gather_copy_in", k) for k in range(9)]
    assert [lk.copy_outs for lk in gathers] == [(("fsdp::split_with_sizes_copy", k),) for k in range(9)]
    # the root module's all-gather (the first) feeds the final norm, which runs after the 8 blocks' first ops
    firsts = [lk.consumer[1] for lk in gathers if lk.consumer[0] == "aten::layer_norm"]
    assert firsts[0] > max(firsts[1:])
    # reduce-scatters read the gradients FSDP's chunk_cat packed
    assert {lk.producer[0] for lk in et.links if not lk.gather} == {"fsdp::chunk_cat"}


def _rank0_graph(path: Path, et: ExecTrace | None):
    trace = load_traces([path], require_gpu=False).ranks[0]  # the CPU recording has no GPU activity
    return build_rank_graph(trace, blocking_syncs(trace, None), "ProfilerStep#(\\d+)", et)


def test_the_execution_trace_sets_the_roles_in_each_step():
    g = _rank0_graph(FSDP, read_exec_trace(FSDP / "rank0.et.json.gz"))
    et_mods = {i for i, m in enumerate(g.modules) if m.startswith("et:")}
    comm = (g.cat == CAT_CODES["comm"]) & np.isin(g.module, list(et_mods))
    assert int((comm & (g.role == GATHER)).sum()) == 27  # 9 all-gathers in each of the 3 recorded steps
    for m in et_mods:
        mine = g.module == m
        assert (mine & (g.role == FORWARD) & (g.cat == CAT_CODES["compute"])).any()
        assert (mine & (g.role == GATHER) & (g.cat != CAT_CODES["comm"])).any()  # the copy-in
        assert (mine & (g.role == COPY_OUT)).any()
        # the consumer runs after its all-gather
        ag = np.flatnonzero(mine & (g.cat == CAT_CODES["comm"]))
        assert g.start[np.flatnonzero(mine & (g.role == FORWARD))].min() > g.start[ag].max()
    assert any("27 all-gathers' consumers from the Execution Trace" in n and "3 steps" in n for n in g.notes)


def test_windows_whole_trace_or_per_step():
    et = ExecTrace("x", 0, 1, 10, (), {"a": 2})
    one = np.asarray([[0, 1, 7], [10, 11, 7]], dtype=np.int64)
    assert _windows(et, {"a": one}, [(0, 5), (5, 20)])[0][0][0] < 0  # counted alike over the whole trace
    four = np.asarray([[0, 1, 7], [2, 3, 7], [10, 11, 7], [30, 31, 7]], dtype=np.int64)
    assert _windows(et, {"a": four}, [(0, 5), (5, 20), (20, 40)]) == ([(0, 5)], 2)  # step 1 has 2, the others 1


def _gz(tmp: Path, name: str, data: bytes) -> Path:
    p = tmp / name
    p.write_bytes(gzip.compress(data))
    return p


def test_bad_execution_traces_are_one_line_refusals(tmp_path: Path):
    raw = gzip.decompress((AG / "rank0.et.json.gz").read_bytes())
    with pytest.raises(BadInputError, match="truncated JSON"):
        read_exec_trace(_gz(tmp_path, "rank0.et.json.gz", raw[: len(raw) // 2]))
    with pytest.raises(BadInputError, match="not a PyTorch Execution Trace"):
        read_exec_trace(AG / "rank0.json.gz")  # a Kineto trace
    with pytest.raises(BadInputError, match="schema 1 this reader does not know .*missing required field `name`"):
        read_exec_trace(_gz(tmp_path, "x.et.json.gz", json.dumps({"schema": "1", "nodes": [{"id": 1}]}).encode()))
    with pytest.raises(BadInputError, match="not a PyTorch Execution Trace"):
        read_exec_trace(_gz(tmp_path, "y.et.json.gz", b"[1, 2]"))
    old = {"schema": "1.0.1", "nodes": [{"id": 1, "name": "x", "inputs": [1], "outputs": []}]}  # inputs as lists
    with pytest.raises(BadInputError, match="of schema 1.0.1 this reader does not know"):
        read_exec_trace(_gz(tmp_path, "z.et.json.gz", json.dumps(old).encode()))
    with pytest.raises(BadInputError, match="second Execution Trace for rank 0"):
        read_exec_traces([AG / "rank0.et.json.gz", AG / "rank0.et.json.gz"])


def test_another_ranks_execution_trace_is_refused(tmp_path: Path):
    wrong = tmp_path / "rank0.et.json.gz"
    shutil.copy(AG / "rank1.et.json.gz", wrong)  # rank 1's file under rank 0's name: another process
    with pytest.raises(BadInputError, match="recorded by process .* not this rank's Execution Trace"):
        _rank0_graph(AG, read_exec_trace(wrong))
    seven = tmp_path / "rank7.et.json.gz"
    shutil.copy(AG / "rank1.et.json.gz", seven)
    with pytest.raises(BadInputError, match="rank 7's Execution Trace, but the traces hold rank"):
        check_exec_ranks(read_exec_traces([seven]), [0, 1])


def test_graph_run_with_execution_traces_on_the_cpu_recording():
    ets = read_exec_traces([AG / "rank0.et.json.gz", AG / "rank1.et.json.gz"])
    run = graph_run(load_traces([AG], require_gpu=False), None, ets)
    assert set(run.sg.ranks) == {0, 1}
    # the Execution Trace holds one step's 4 all-gathers, the trace 3 steps of 4: mapped step by step (a CPU run
    # launches no GPU activity, so none takes a role)
    for r in (0, 1):
        assert any(f"rank {r}: data dependencies: 0 all-gathers' consumers from the Execution Trace" in n
                   and "(4 in it, mapped onto 3 steps)" in n for n in run.sg.notes), run.sg.notes


def test_whatif_et_bad_file_exit_3(tmp_path: Path):
    bad = _gz(tmp_path, "rank0.et.json.gz", b'{"schema": "1.1", "nodes": [')
    r = subprocess.run([sys.executable, "-m", "overlapscope", "whatif", str(ROOT / "sample_traces" / "ag-gemm" /
                        "tuned"), "--fix", "prefetch", "--et", str(bad), "--no-cache"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 3 and r.stderr.strip().count("\n") == 0
    assert str(bad) in r.stderr and "truncated JSON" in r.stderr


def test_directory_search_leaves_execution_traces_out():
    assert sorted(Path(p).name for p in load_traces([AG], require_gpu=False).sources) == ["rank0.json.gz",
                                                                                             "rank1.json.gz"]


def _nsys_fsdp(path: Path, nvtx: bool) -> Path:
    """One rank: FSDP's all_gather range launches a copy-in and an NCCL all-gather, the forward of blocks.0 a GEMM,
    with NVTX ranges named as record_function names them (one with emit_nvtx's suffix)."""
    n = Nsys()
    n.range("ProfilerStep#1", 0, 1_000_000)
    n.range("FSDP::all_gather (blocks.0)", 1_000, 20_000)
    n.kernel(30_000, 40_000, "CatArrayBatchedCopy", launch=2_000, stream=7)
    n.kernel(50_000, 150_000, "ncclDevKernel_AllGather_RING_LL(ncclDevComm*)", launch=10_000, stream=9)
    n.range("FSDP::pre_forward (blocks.0), seq = 4", 25_000, 30_000)
    n.kernel(160_000, 400_000, "sm90_xmma_gemm_bf16", launch=35_000, stream=7)
    n.range("FSDP::post_forward (blocks.0)", 45_000, 50_000)
    n.write(path)
    if not nvtx:
        with sqlite3.connect(path) as conn:
            conn.execute("DROP TABLE NVTX_EVENTS")
    return path


def test_nvtx_ranges_give_the_module_roles(tmp_path: Path):
    trace = load_traces([_nsys_fsdp(tmp_path / "fsdp.sqlite", True)]).ranks[0]
    g = build_rank_graph(trace, blocking_syncs(trace, None), "ProfilerStep#(\\d+)")
    order = np.argsort(g.start)
    assert g.role[order].tolist() == [GATHER, GATHER, FORWARD]
    assert g.modules == ["blocks.0"] and (g.module == 0).all()
    assert any("module roles of 1 modules from NVTX ranges" in n for n in g.notes)


def test_an_export_without_nvtx_has_no_roles_and_says_so(tmp_path: Path):
    trace = load_traces([_nsys_fsdp(tmp_path / "fsdp.sqlite", False)]).ranks[0]
    g = build_rank_graph(trace, blocking_syncs(trace, None), "ProfilerStep#(\\d+)")
    assert (g.role == NONE).all() and g.modules == []
    assert any("no NVTX ranges, so no module roles" in n for n in g.notes)
