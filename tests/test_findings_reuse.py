"""Per-rank findings made beside the parse are reused after the cross-rank stage: when collectives
are matched (shared clocks), only the detectors that read the start shift run again in the caller."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analyzers.findings import detect_findings, detect_rank
from analyzers.findings.comm_slowed_by_overlap import transfer_starts
from analyzers.findings.registry import RANK_FINDINGS, START_SHIFT_FINDINGS, FindingParams
from analyzers.io.load import load_traces
from analyzers.overlap.metrics import AnalysisOptions, rank_metrics

from . import synth_findings as sf

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
NOT_SHIFTED = tuple(f for f in RANK_FINDINGS if f not in START_SHIFT_FINDINGS)


def _dicts(findings) -> list[dict]:
    return [f.to_dict() for f in findings]


def test_matched_collectives_rerun_only_the_start_shift_detectors(monkeypatch):
    # rank 0 starts its overlapped all-gathers 60 µs before rank 1 (test_findings: late peer): alone,
    # rank 0's waits look like contention; from the last arrival they are not.
    ts = sf.trace_set(sf.slowed("contended", rank=0, peer_lead=60_000), sf.slowed("contended", rank=1))
    made = {r: detect_rank(t) for r, t in ts.ranks.items()}  # as the per-rank stage makes them: no shift
    assert [f.id for f in made[1]] == ["comm-slowed-by-overlap", "comm-starved-by-compute"]
    fresh = detect_findings(ts)

    def must_not_run(view, context):
        raise AssertionError("a detector that ignores the start shift ran again")

    for finding in NOT_SHIFTED:
        monkeypatch.setattr(finding, "detect", must_not_run)
    reused = detect_findings(ts, precomputed=made)
    assert _dicts(reused) == _dicts(fresh)
    # comm-slowed-by-overlap was measured again, from the last rank's arrival; rank 1's
    # comm-starved-by-compute is the one made beside the parse
    assert sorted((f.id, f.ranks[0]) for f in reused) == [
        ("comm-slowed-by-overlap", 0), ("comm-slowed-by-overlap", 1), ("comm-starved-by-compute", 1)]
    slowed = {f.ranks[0]: f.evidence["measured_from"] for f in reused if f.id == "comm-slowed-by-overlap"}
    assert slowed == {0: "last rank's arrival", 1: "last rank's arrival"}
    assert {f.evidence["measured_from"] for r in made for f in made[r] if f.id == "comm-slowed-by-overlap"} == \
        {"kernel start"}


@pytest.mark.parametrize("run", ["ag-gemm/host-sync", "ag-gemm/sync-in-loop", "fsdp/zero3", "gemm-rs/ring",
                                 "symm-mem/two-stream"])
def test_only_the_registered_detectors_read_the_start_shift(run):
    """Every other per-rank detector gives the same findings with and without the shift, on real
    runs whose collectives do move: what makes reusing their per-rank findings sound."""
    ts = load_traces([SAMPLES / run])
    eff = transfer_starts(ts, FindingParams())
    assert any(not np.array_equal(eff[r], t.gpu["start_ns"].to_numpy()) for r, t in ts.ranks.items())
    for r, t in ts.ranks.items():
        metrics = rank_metrics(t, AnalysisOptions())
        shifted = detect_rank(t, metrics, eff_start=eff[r], detectors=NOT_SHIFTED)
        assert _dicts(shifted) == _dicts(detect_rank(t, metrics, detectors=NOT_SHIFTED))
