"""CUDA-graph replays: kernels attributed to their cudaGraphLaunch, and a replay treated as one launch.

The trace is built by hand in the Kineto format a graph replay has: one `cuda_runtime` event
`cudaGraphLaunch` (CUPTI callback id 311, cudaGraphLaunch_v10000) whose correlation id every kernel of
the replay carries (DeepSeek's decode profile shows this: 3,437 kernels sharing the correlation of one
cudaGraphLaunch), plus the kernels' `graph id` / `graph node id` args, which CUPTI reports and Kineto
writes for graph kernels (pytorch/kineto pull request 1567 describes the CUDA side).
"""

from __future__ import annotations

import json
from pathlib import Path

from analyzers.findings import FindingParams
from analyzers.findings.launch_bound_gaps import launch_bound_gaps
from analyzers.findings.view import RankView, windows_of
from analyzers.io.load import load_traces
from analyzers.syncs.blocking import blocking_syncs
from analyzers.timeline.graphs import GRAPH_LAUNCH_COLUMN, graph_replay_summary

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GRAPH_CORR = 7077


def _x(cat: str, name: str, ts: float, dur: float, pid: int, tid: int, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _kernel(name: str, start: float, end: float, corr: int, stream: int = 7, **args) -> dict:
    return _x("kernel", name, start, end - start, 0, stream, device=0, context=1, stream=stream, correlation=corr,
              **{"External id": corr}, **args)


def _graph_trace(path: Path, sync: bool = False) -> Path:
    """µs: an eager kernel [10, 50); cudaGraphLaunch at 100 replays 4 kernels: [130, 150), an all-reduce
    [150, 200) on stream 9, [240, 260) and [290, 310) (gaps of 30 µs inside the replay: dependencies); then
    three eager kernels, each launched after the GPU ran dry: launches 400, 460, 520 -> [405, 425),
    [465, 480), [525, 540). With sync, a cudaStreamSynchronize [120, 312) waits for the replay."""
    host = (1000, 1001)
    ev = [_x("cuda_runtime", "cudaLaunchKernel", 5, 3, *host, cbid=211, correlation=1),
          _kernel(GEMM, 10, 50, 1),
          _x("cuda_runtime", "cudaGraphLaunch", 100, 15, *host, cbid=311, correlation=GRAPH_CORR)]
    for node, (name, s, e, stream) in enumerate([(GEMM, 130, 150, 7), (NCCL, 150, 200, 9), (GEMM, 240, 260, 7),
                                                 (GEMM, 290, 310, 7)]):
        ev.append(_kernel(name, s, e, GRAPH_CORR, stream, **{"graph id": 3, "graph node id": 100 + node}))
    for i, (launch, s, e) in enumerate([(400, 405, 425), (460, 465, 480), (520, 525, 540)]):
        ev += [_x("cuda_runtime", "cudaLaunchKernel", launch, 3, *host, cbid=211, correlation=10 + i),
               _kernel(GEMM, s, e, 10 + i)]
    if sync:
        ev.append(_x("cuda_runtime", "cudaStreamSynchronize", 120, 192, *host, cbid=131, correlation=50))
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1, "backend": "nccl"}, "traceEvents": ev}
    path.write_text(json.dumps(doc))
    return path


def _trace(tmp_path: Path, sync: bool = False):
    return load_traces([_graph_trace(tmp_path / "graph.json", sync)]).ranks[0]


def test_replayed_kernels_are_attributed_to_their_graph_launch(tmp_path):
    t = _trace(tmp_path)
    g = t.gpu.sort_values("start_ns")
    assert list(g[GRAPH_LAUNCH_COLUMN]) == [-1, GRAPH_CORR, GRAPH_CORR, GRAPH_CORR, GRAPH_CORR, -1, -1, -1]
    assert graph_replay_summary(t) == {"n_graph_launches": 1, "n_graph_kernels": 4}


def test_gaps_inside_a_replay_are_not_launch_bound_and_the_replay_is_one_launch(tmp_path):
    t = _trace(tmp_path)
    params = FindingParams()
    gaps = launch_bound_gaps(RankView(t, params, windows_of(t, None, params.step_pattern)))
    # [50, 130): the host launched the replay at 100, after the GPU ran dry: one launch-bound gap, named
    # after the replay. [200, 240) and [260, 290) lie inside the replay: its kernels were all queued at 100.
    # Then the three eager gaps [310, 405), [425, 465), [480, 525).
    assert list(zip(gaps["start_ns"] // 1000, gaps["end_ns"] // 1000, strict=True)) == [
        (50, 130), (310, 405), (425, 465), (480, 525)]
    assert gaps["next_name"].iloc[0].startswith("graph replay: ")
    assert list(gaps["next_graph_launch"]) == [GRAPH_CORR, -1, -1, -1]
    assert list(gaps["next_launch_ns"] // 1000) == [100, 400, 460, 520]


def test_a_sync_on_a_replay_charges_the_idle_after_the_whole_replay(tmp_path):
    t = _trace(tmp_path, sync=True)
    syncs = blocking_syncs(t)
    assert len(syncs) == 1
    s = syncs.iloc[0]
    # The host waited from 120 until the replay's last kernel ended (310) and returned at 312: the replay,
    # launched at 100, was all queued when the sync began (one launch, four kernels). The next launch (400)
    # starts its kernel at 405: the GPU idled from the sync's end, 312 -> 405 = 93 µs, because of it.
    assert s["host_blocked_ns"] == 192_000
    assert s["gpu_idle_ns"] == 93_000


def test_nsys_graph_replay_is_attributed(tmp_path):
    """Nsight Systems names the call cudaGraphLaunch_v10000; the replayed kernels carry its correlationId."""
    from tests.trace_files import Nsys, gpid

    n = Nsys()
    graph = n.call("cudaGraphLaunch_v10000", 100_000, 115_000)
    for s, e in ((130_000, 150_000), (240_000, 260_000)):
        n.kernels.append((s, e, 0, 1, 7, graph, gpid(n.pid), GEMM, GEMM))
    n.kernel(405_000, 425_000, launch=400_000)
    t = load_traces([n.write(tmp_path / "graph.sqlite")]).ranks[0]
    g = t.gpu.sort_values("start_ns")
    assert list(g[GRAPH_LAUNCH_COLUMN]) == [graph, graph, -1]
    assert graph_replay_summary(t) == {"n_graph_launches": 1, "n_graph_kernels": 2}
