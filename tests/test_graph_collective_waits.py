"""ProcessGroupNCCL's stream wait inside a collective call (analyzers/graph/deps.py): c10d records an event on the
caller's current stream and makes the collective's stream wait for it. Where the collective's kernel runs on a
stream that also runs the caller's compute, the two streams are one and the wait orders nothing; where it runs on
a stream of collectives only (the process group's own), the wait stays an edge to the other stream.

The hand-made trace is Kineto JSON (µs): a GEMM launched at 0 runs [5, 105) on stream 7; the host's collective call
(record_param_comms, [200, 215)) records an event, calls cudaStreamWaitEvent for stream 9 at 203 and launches an
all-gather at 210 that runs [215, 235) on stream 9; with `compute_on_9`, a second GEMM launched at 240, outside the
call, runs [245, 345) on stream 9.
"""

from __future__ import annotations

import json
from pathlib import Path

from analyzers.io.load import load_traces
from analyzers.report import graph_run
from tests.test_graph_idle_waits import GEMM, NCCL, _x


def _trace(path: Path, compute_on_9: bool) -> Path:
    ev = [_x("cuda_runtime", "cudaLaunchKernel", 0, 3, 1000, cbid=211, correlation=1),
          _x("kernel", GEMM, 5, 100, 7, device=0, stream=7, correlation=1),
          _x("cpu_op", "record_param_comms", 200, 15, 1000),
          _x("cuda_runtime", "cudaEventRecord", 201, 1, 1000, cbid=135, correlation=2),
          _x("cuda_runtime", "cudaStreamWaitEvent", 203, 2, 1000, cbid=147, correlation=3),
          _x("cuda_sync", "Stream Wait Event", 205, 0, 9, device=0, stream=9, correlation=3,
             wait_on_stream=-1, wait_on_cuda_event_record_corr_id=-1),
          _x("cuda_runtime", "cudaLaunchKernel", 210, 3, 1000, cbid=211, correlation=4),
          _x("kernel", NCCL, 215, 20, 9, device=0, stream=9, correlation=4)]
    if compute_on_9:
        ev += [_x("cuda_runtime", "cudaLaunchKernel", 240, 3, 1000, cbid=211, correlation=5),
               _x("kernel", GEMM, 245, 100, 9, device=0, stream=9, correlation=5)]
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1, "backend": "nccl"}, "traceEvents": ev}
    path.write_text(json.dumps(doc))
    return path


def test_a_collective_on_the_callers_stream_does_not_wait_for_another_stream(tmp_path):
    sg = graph_run(load_traces([_trace(tmp_path / "own.json", compute_on_9=True)])).sg
    ag = next(i for i in range(sg.n) if sg.node_label(i) == NCCL)
    assert int(sg.dep[ag]) == -1


def test_a_collective_on_its_own_stream_waits_for_the_callers_work(tmp_path):
    sg = graph_run(load_traces([_trace(tmp_path / "pg.json", compute_on_9=False)])).sg
    ag = next(i for i in range(sg.n) if sg.node_label(i) == NCCL)
    gemm = next(i for i in range(sg.n) if sg.node_label(i) == GEMM)
    assert int(sg.dep[ag]) == gemm  # the last activity launched before the call on stream 7 (an idle wait)


def test_host_sync_all_gathers_wait_for_no_gemm_of_their_step():
    """ag-gemm/host-sync (2 × H200): each all-gather runs on the worker stream that runs its GEMM, launched by a
    collective call whose own stream wait orders nothing; no all-gather waits for the other worker's GEMM of its
    step (the fixed program, sync-before-loop, has no such wait), and host-syncs predicts that run's step within
    2 % (3.634 against 3.616 ms when written)."""
    from analyzers.graph.analysis import whatif
    from analyzers.graph.fixes import parse_fix
    from analyzers.graph.rank_graph import CAT_CODES
    from analyzers.report import analyze

    root = Path(__file__).resolve().parents[1] / "sample_traces" / "ag-gemm"
    run = analyze(load_traces([root / "host-sync"])).graph_run
    sg = run.sg
    comm = (sg.cat == CAT_CODES["comm"]) & (sg.step >= 0)
    src = sg.dep[comm]
    same_step_gemm = (src >= 0) & (sg.cat[src] == CAT_CODES["compute"]) & (sg.step[src] == sg.step[comm])
    assert comm.sum() == 24 and not same_step_gemm.any()
    fixed = analyze(load_traces([root / "sync-before-loop"])).critical_path["fidelity"]["measured_step_ns"]
    predicted = whatif(run, [parse_fix("host-syncs")])["predicted_step_ns"]
    assert abs(predicted / fixed - 1) < 0.02
