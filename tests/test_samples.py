"""Acceptance checks on the real 2xH200 sample traces that runners/ made (sample_traces/)."""

from __future__ import annotations

import pytest

from analyzers.io.load import load_traces
from analyzers.report import analyze

from .conftest import SAMPLES


def ratios(path) -> dict[int, float]:
    rep = analyze(load_traces([SAMPLES / path]), diagnose=False, cross_rank=False)
    return {m.rank: m.overlap_ratio for m in rep.ranks}


@pytest.mark.parametrize("variant", ["sync-in-loop", "sync-before-loop"])
def test_nsys_export_agrees_with_torch_profiler_trace(variant):
    """Same schedule, different runs, different profilers: per-rank overlap within 10 points."""
    nsys, torch = ratios(f"ag-gemm-nsys/{variant}"), ratios(f"ag-gemm/{variant}")
    assert sorted(nsys) == sorted(torch) == [0, 1]
    for r in (0, 1):
        assert abs(nsys[r] - torch[r]) <= 0.10, (variant, r, nsys[r], torch[r])


def test_nsys_sample_has_iterations_from_nvtx():
    rep = analyze(load_traces([SAMPLES / "ag-gemm-nsys/sync-before-loop"]), diagnose=False, cross_rank=False)
    assert rep.fmt == "nsys"
    assert all(m.iteration_summary["n"] >= 3 for m in rep.ranks)


def test_host_sync_hides_nothing_and_sync_before_loop_beats_sync_in_loop():
    host = ratios("ag-gemm/host-sync")
    before, inside = ratios("ag-gemm/sync-before-loop"), ratios("ag-gemm/sync-in-loop")
    for r in (0, 1):
        assert host[r] < 0.05
        assert before[r] > inside[r] + 0.1


def test_tuned_ag_gemm_hides_its_transfers_and_meets_the_time_bound():
    """The runners issue's acceptance, checked on the recorded 2×H200 sweep: overlap ≥ 0.8 on
    both ranks over the whole profiled window; time ≤ 1.05 × (compute + comm / S); not
    slower than PyTorch's fused_all_gather_matmul (CUDA-event medians from the manifests)."""
    import json

    tuned = ratios("ag-gemm/tuned")
    assert sorted(tuned) == [0, 1] and min(tuned.values()) >= 0.8, tuned
    man = json.loads((SAMPLES / "ag-gemm/tuned/manifest.json").read_text())
    fused = json.loads((SAMPLES / "ag-gemm/fused-ref/manifest.json").read_text())
    t, steps = man["timings_ms"], man["params"]["steps"]
    assert t["variant_ms"] <= 1.05 * (t["compute_alone_ms"] + t["comm_alone_ms"] / steps)
    assert t["variant_ms"] <= fused["timings_ms"]["variant_ms"]
