"""A start delay that no recorded wait explains is an inferred cross-stream edge, judged against the rank's
stream turnaround measured on the gaps no other stream could have set (deps._own_turnaround).

The hand-made trace is Kineto JSON (µs), the shape of a ring GEMM + reduce-scatter on two compute streams
(gemm-rs ring-uncoalesced at M=32768): the host launches everything at once; each GEMM fills the GPU, so a
GEMM queued on the other stream gets SMs only in the tail of the one running. Stream 7 runs GEMM k1 [5, 105),
a fill [106, 107) and GEMM k3 [200, 300); stream 9 runs a fill [6, 8), GEMM k2 [105, 205) (a recorded wait
on k1), a fill [206, 208) and GEMM k4 [301, 401) (a recorded wait on k3). k3 has no recorded wait: it
started in k2's tail, 90 µs after the fill before it. Every queued gap counted, [1, 1, 90, 93, 97] µs, the
"turnaround" is 90 µs and explains k3's delay away; the gaps inside which another stream's kernel ended
(k2, k3, k4's) left out, it is 1 µs, and k3 is late, waiting for k2 (5 µs before its end). Without that
edge the replay ran k3 from 108 µs beside k2, and the step ended 92 µs early.
"""

from __future__ import annotations

import json
from pathlib import Path

from analyzers.io.load import load_traces
from analyzers.report import graph_run
from tests.trace_files import kineto_x as _x

US = 1_000
GEMM = "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT"
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"


def _launch(corr: int, at: float, name: str, start: float, dur: float, stream: int) -> list[dict]:
    return [_x("cuda_runtime", "cudaLaunchKernel", at, 0.5, 1000, cbid=211, correlation=corr),
            _x("kernel", name, start, dur, stream, device=0, stream=stream, correlation=corr)]


def _wait(corr: int, at: float, stream: int, on: int) -> list[dict]:
    return [_x("cuda_runtime", "cudaStreamWaitEvent", at, 0.5, 1000, cbid=147, correlation=corr),
            _x("cuda_sync", "Stream Wait Event", at + 0.5, 0, stream, device=0, stream=stream, correlation=corr,
               wait_on_stream=on, wait_on_cuda_event_record_corr_id=-1)]


def _two_gemm_streams(path: Path) -> Path:
    ev = (_launch(1, 0, GEMM, 5, 100, 7) + _launch(2, 1, FILL, 6, 2, 9) + _wait(3, 2, 9, 7)
          + _launch(4, 3, GEMM, 105, 100, 9) + _launch(5, 4, FILL, 106, 1, 7) + _launch(6, 5, GEMM, 200, 100, 7)
          + _launch(7, 6, FILL, 206, 2, 9) + _wait(8, 7, 9, 7) + _launch(9, 8, GEMM, 301, 100, 9))
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1, "backend": "nccl"}, "traceEvents": ev}
    path.write_text(json.dumps(doc))
    return path


def test_a_gemm_that_waited_for_sms_without_a_recorded_wait_gets_an_inferred_edge(tmp_path):
    run = graph_run(load_traces([_two_gemm_streams(tmp_path / "two-gemm-streams.json")]))
    sg = run.sg
    by_start = {int(s) // US: i for i, s in enumerate(sg.start)}
    k1, k2, k3, k4 = by_start[5], by_start[105], by_start[200], by_start[301]
    assert int(sg.dep[k2]) == k1 and int(sg.dep[k4]) == k3  # the recorded waits
    assert int(sg.dep[k3]) == k2 and int(sg.dep_lat[k3]) == -5 * US  # inferred: k3 started in k2's tail
    assert int(sg.turnaround[k3]) == 1 * US
    # the replay reproduces the trace: k3 in k2's tail, k4 at k3's end (a recorded wait has no latency: 1 µs early)
    assert (run.base.start[[k1, k2, k3, k4]] // US).tolist() == [5, 105, 200, 300]
    assert int(sg.end.max() - run.base.end.max()) == 1 * US
