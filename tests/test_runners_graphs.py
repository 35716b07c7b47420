"""The tuned schedules replayed as CUDA graphs (recorded on 2 × H100): their traces still analyze.

One `cudaGraphLaunch` per step launches every kernel of it: the analysis must still count the
copy-engine transfers as communication and find them hidden, and `launch-bound-gaps` (many small
launches leaving the GPU idle) must stay silent: a replayed graph has no per-kernel launches.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from analyzers.io.load import load_traces
from analyzers.report import analyze

DATA = Path(__file__).resolve().parent / "data" / "graph-replay"


@pytest.mark.parametrize("algo", ["gemm-rs", "ag-gemm"])
def test_graph_replay_trace_is_one_launch_per_step(algo: str) -> None:
    for rank in (0, 1):
        with gzip.open(DATA / algo / f"rank{rank}.json.gz", "rt") as f:
            events = json.load(f)["traceEvents"]
        launches = [e for e in events if e.get("name") == "cudaGraphLaunch"]
        kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy")]
        assert len(launches) == 3 and len(kernels) >= 3 * 4, (algo, rank, len(launches), len(kernels))
        assert not [e for e in events if e.get("name") in ("cudaLaunchKernel", "cudaMemcpyAsync")]


@pytest.mark.parametrize("algo", ["gemm-rs", "ag-gemm"])
def test_graph_replay_hides_its_transfers_and_raises_no_launch_gaps(algo: str) -> None:
    rep = analyze(load_traces([DATA / algo]))
    assert sorted(m.rank for m in rep.ranks) == [0, 1]
    assert min(m.overlap_ratio for m in rep.ranks) >= 0.9, [m.overlap_ratio for m in rep.ranks]
    assert rep.diagnosed and "launch-bound-gaps" not in rep.finding_ids()
