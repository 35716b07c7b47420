"""Findings engine: every detector fires on its pattern and stays silent on a healthy look-alike.

The schedules come from tests/synth_findings.py; each expected figure follows from its constants
(worked out in the comments).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzers.findings import detect_findings, detect_rank, findings_present, trace_set_syncs
from analyzers.findings.comm_slowed_by_overlap import comm_overlap_comparison, transfer_starts
from analyzers.findings.comm_starved_by_compute import starved_comm_kernels
from analyzers.findings.finding import CATALOGUE, Finding, Severity
from analyzers.findings.launch_bound_gaps import launch_bound_gaps
from analyzers.findings.registry import FindingParams
from analyzers.findings.view import RankView, windows_of
from analyzers.overlap.metrics import AnalysisOptions, rank_metrics
from analyzers.timeline.constants import NO_TIME
from analyzers.timeline.iterations import StepSelection, launch_times

from . import synth_findings as sf
from .synth import COMM, GEMM

DETECTED_HERE = {"host-blocking-sync", "serialized-streams", "front-loaded-collectives",
                 "copy-kernels-block-overlap", "launch-bound-gaps", "comm-slowed-by-overlap",
                 "comm-starved-by-compute"}


def ids(trace_or_set, params: FindingParams | None = None) -> list[str]:
    ts = trace_or_set if hasattr(trace_or_set, "ranks") else sf.trace_set(trace_or_set)
    return [f.id for f in detect_findings(ts, params=params)]


def only(trace, fid: str, params: FindingParams | None = None) -> Finding:
    found = [f for f in detect_findings(sf.trace_set(trace), params=params) if f.id == fid]
    assert len(found) == 1, [f.id for f in detect_findings(sf.trace_set(trace), params=params)]
    return found[0]


# --- host-blocking-sync ---------------------------------------------------------------------

def test_host_sync_fires_with_one_sync_per_step_and_the_idle_it_caused():
    f = only(sf.pipeline("host-sync"), "host-blocking-sync")
    ev = f.evidence
    # 4 steps x 3 iterations, less the very last sync: nothing is launched after it, so it caused no
    # idle (the trace ends there) and is not counted
    assert ev["n_syncs"] == 11 and ev["syncs_per_iteration"] == {"1": 4, "2": 4, "3": 3}
    # inside an iteration: next launch 2 µs after the sync returns, starts 8 µs later -> 10 µs idle;
    # after the last step: 958 µs until the next iteration's first all-gather, of which only the
    # 133 µs the call held the host are the sync's (the host's own pace between iterations is the rest)
    assert ev["gpu_idle_ns_median"] == 10_000
    assert ev["gpu_idle_ns_after_syncs_total"] == 9 * 10_000 + 2 * 958_000
    assert ev["gpu_idle_ns_total"] == 9 * 10_000 + 2 * 133_000
    assert ev["apis"] == {"cudaStreamSynchronize": 11}
    # 356 µs of the 5.04 ms analysed (7%): below critical_share
    assert f.ranks == [0] and f.severity == Severity.warning
    assert "11 blocking host syncs (4 per iteration)" in f.title


def test_host_sync_total_idle_is_the_sum_over_syncs():
    t = sf.pipeline("host-sync", iterations=1)
    f = only(t, "host-blocking-sync")
    syncs = trace_set_syncs(sf.trace_set(t))
    assert f.evidence["gpu_idle_ns_total"] == int(syncs["gpu_idle_ns"].sum())
    # 3 syncs followed by a launch 10 µs later; nothing is launched after the last one: the trace
    # ends there and that sync caused no idle (it used to be charged until the trace's end)
    assert f.evidence["gpu_idle_ns_total"] == 3 * 10_000
    assert f.evidence["n_syncs"] == 3 and len(syncs) == 4


def test_sync_after_all_communication_of_the_step_is_silent():
    # a loss.item()-style sync from 450 µs (the last all-gather ended at 400 µs) until the last
    # matmul ends (700 µs): the GPU then idles until the next iteration, but no comm was left to hide
    t = sf.pipeline("overlapped", sync_at=("cudaStreamSynchronize", 450_000, 702_000))
    syncs = trace_set_syncs(sf.trace_set(t))
    # blocking, long idle after (the last one: nothing launched after it, no idle) ...
    assert len(syncs) == 3 and (syncs["gpu_idle_ns"].iloc[:2] > 1_000_000).all()
    assert syncs["gpu_idle_ns"].iloc[2] == 0 and syncs["next_gpu_start_ns"].iloc[2] == NO_TIME
    assert "host-blocking-sync" not in ids(t)  # ... but outside the overlapped region


def test_sync_that_leaves_the_gpu_busy_is_silent():
    # inside the region (all-gather 1 in flight during [50, 150) µs), the host then launches a tail
    # kernel at 152 µs, queued behind work that keeps the GPU busy until it runs: no idle
    t = sf.pipeline("overlapped", sync_at=("cudaEventSynchronize", 50_000, 150_000), tail_launch=152_000)
    syncs = trace_set_syncs(sf.trace_set(t))
    assert len(syncs) == 3 and (syncs["gpu_idle_ns"] == 0).all()
    assert "host-blocking-sync" not in ids(t)
    # the same sync returning only after the GPU drained (700 µs), the tail launched at 706 µs and
    # starting at 714 µs: 9 µs idle per iteration
    drained = sf.pipeline("overlapped", sync_at=("cudaEventSynchronize", 50_000, 705_000), tail_launch=706_000)
    f = only(drained, "host-blocking-sync")
    assert f.evidence["n_syncs"] == 3 and f.evidence["gpu_idle_ns_total"] == 3 * 9_000


def test_stream_waits_are_not_host_syncs():
    assert "host-blocking-sync" not in ids(sf.pipeline("serialized"))  # 24 cudaStreamWaitEvent calls


# --- serialized-streams ---------------------------------------------------------------------

def test_serialized_streams_fires_on_the_sync_in_loop_chain():
    f = only(sf.pipeline("serialized"), "serialized-streams")
    ev = f.evidence
    assert ev["streams"] == [1, 2, sf.NCCL_STREAM] and ev["comm_streams"] == [sf.NCCL_STREAM]
    assert ev["concurrent_ns"] == 0
    assert ev["n_iterations_serialized"] == 3
    # per stream over 3 iterations: NCCL 4 x 100 µs, each worker 2 x 150 µs
    assert ev["busy_ns_per_stream"] == {"1": 900_000, "2": 900_000, "20": 1_200_000}
    assert ev["stream_wait_event_calls_per_iteration"] == {"1": 8, "2": 8, "3": 8}
    assert f.severity == Severity.critical  # communication never hidden
    assert "issued 8 cudaStreamWaitEvent calls per iteration" in f.explanation


def test_overlapped_pipeline_is_not_serialized():
    assert ids(sf.pipeline("overlapped")) == []


def test_non_overlapped_baseline_is_not_serialized_streams():
    # one all-gather phase then one matmul phase: no interleaving inside an iteration
    assert "serialized-streams" not in ids(sf.pipeline("baseline"))


def test_host_sync_serialization_is_reported_as_host_sync_only():
    assert ids(sf.pipeline("host-sync")) == ["host-blocking-sync"]


def _alternating_gemms(comm_ns: int | None):
    """Per iteration 4 GEMMs of 20 µs, 2 µs apart, alternating between streams 1 and 2 (never at
    once); with comm_ns, a comm kernel of that length on stream 1 right after each GEMM."""
    b = sf.Builder()
    for i in range(3):
        base = sf.iteration(b, i)
        for s in range(4):
            t = base + s * 22_000
            b.kernel(t, t + 20_000, 1 + s % 2, GEMM)
            if comm_ns is not None:
                b.kernel(t + 20_000, t + 20_000 + comm_ns, 1, COMM)
    return b.build()


def test_zero_length_comm_makes_no_comm_stream_of_serialized_streams():
    # streams 1 and 2: 2 x 20 µs each per iteration, never at once, 3 switches >= 2 streams: serialized
    # in 3/3 iterations, 120 µs per stream. Compute only: warning (120 µs < 10% of the span).
    base = only(_alternating_gemms(None), "serialized-streams")
    assert (base.evidence["streams"], base.evidence["comm_streams"]) == ([1, 2], [])
    assert base.evidence["busy_ns_per_stream"] == {"1": 120_000, "2": 120_000}
    assert base.severity == Severity.warning
    # no cudaStreamWaitEvent in the loop: the explanation must not blame inter-stream waits
    assert base.evidence["stream_wait_event_calls_per_iteration"] == {"1": 0, "2": 0, "3": 0}
    assert "cudaStreamWaitEvent calls" not in base.explanation and "no cudaStreamWaitEvent" in base.explanation
    # 1 ns comm kernels on stream 1 take time: stream 1 is a comm stream, critical
    real = only(_alternating_gemms(1), "serialized-streams")
    assert real.evidence["comm_streams"] == [1] and real.severity == Severity.critical
    # comm kernels of start == end take none: exactly the compute-only finding (they used to make
    # stream 1 a comm stream: critical, "its communication is never hidden")
    zero = only(_alternating_gemms(0), "serialized-streams")
    assert zero.to_dict() == base.to_dict()
    assert ids(_alternating_gemms(0)) == ["serialized-streams"]


def test_zero_length_kernels_are_never_serialized_streams():
    # all-gathers of start == end on the NCCL stream take no time: only the two worker streams
    # are serialized (900 µs each over 3 iterations: 2 x 150 µs per iteration), no comm stream
    f = only(sf.pipeline("serialized", ag=0), "serialized-streams")
    assert f.evidence["streams"] == [1, 2] and f.evidence["comm_streams"] == []
    assert f.evidence["busy_ns_per_stream"] == {"1": 900_000, "2": 900_000}
    # the overlapped pipeline with its matmuls of start == end: the all-gathers run on one stream,
    # nothing else takes time, no finding at all
    t = sf.pipeline("overlapped", mm=0)
    assert ids(t) == []


# --- front-loaded-collectives ---------------------------------------------------------------

def test_front_loaded_all_gathers_fire():
    f = only(sf.front_loaded("front-loaded"), "front-loaded-collectives")
    ev = f.evidence
    assert ev["collective"] == "AllGather" and ev["share_before_compute_median"] == 1.0
    assert ev["collectives_before_compute_median"] == 6 and ev["n_iterations_front_loaded"] == 3
    assert ev["comm_before_compute_ns_total"] == 3 * 6 * 60_000


def test_zero3_prefetch_is_not_front_loaded():
    # before compute starts only all-gather 0 and the start of all-gather 1 run: ~15% of all-gather time
    assert "front-loaded-collectives" not in ids(sf.front_loaded("zero3"))


def test_single_collective_then_compute_is_not_front_loaded():
    assert "front-loaded-collectives" not in ids(sf.single_collective_then_compute())


def test_tiny_collectives_before_late_compute_are_not_front_loaded():
    # two 15 µs broadcasts of the batch, then compute only 400 µs later (the host was busy):
    # compute starts late, but 30 µs of communication before it is 0.75% of the 4 ms iteration
    b = sf.Builder()
    bcast = "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
    for i in range(3):
        base = (i + 1) * 2 * sf.ITER
        b.steps.append((i + 1, base - 100_000, base + 2 * sf.ITER - 150_000))
        b.kernel(base, base + 15_000, sf.NCCL_STREAM, bcast)
        b.kernel(base + 20_000, base + 35_000, sf.NCCL_STREAM, bcast)
        b.kernel(base + 400_000, base + 3_000_000, sf.MAIN_STREAM, GEMM)
        b.kernel(base + 3_000_000, base + 3_100_000, sf.NCCL_STREAM, COMM)
    t = b.build()
    assert "front-loaded-collectives" not in ids(t)
    assert "front-loaded-collectives" in ids(t, FindingParams(front_min_comm_share=0.007))


def _all_gathers_then_gemm(gemm_ns: int):
    """Six all-gathers up front, then one GEMM of gemm_ns, in each of 3 iterations."""
    b = sf.Builder()
    for i in range(3):
        base = (i + 1) * 2 * sf.ITER
        b.steps.append((i + 1, base - 100_000, base + 2 * sf.ITER - 150_000))
        for j in range(6):
            b.kernel(base + j * 70_000, base + j * 70_000 + 60_000, sf.NCCL_STREAM, COMM)
        b.kernel(base + 500_000, base + 500_000 + gemm_ns, sf.MAIN_STREAM, GEMM)
    return b.build()


def test_zero_length_compute_is_no_compute_start():
    # with a 1 ms GEMM the schedule is front-loaded; with a GEMM of start == end (a record at clock
    # resolution) the iteration's compute covers no time: no compute start, silent, no crash
    assert "front-loaded-collectives" in ids(_all_gathers_then_gemm(1_000_000))
    assert "front-loaded-collectives" not in ids(_all_gathers_then_gemm(0))


def test_preamble_kernel_does_not_hide_front_loading():
    # the 1 µs fill kernel before the all-gathers is compute, but not where compute starts
    assert "front-loaded-collectives" in ids(sf.front_loaded("front-loaded", preamble=True))
    strict = FindingParams(front_compute_start_share=0.0)
    assert "front-loaded-collectives" not in ids(sf.front_loaded("front-loaded", preamble=True), strict)


# --- copy-kernels-block-overlap -------------------------------------------------------------

def test_exposed_copy_kernels_next_to_collectives_fire():
    f = only(sf.copies("exposed"), "copy-kernels-block-overlap")
    ev = f.evidence
    # per iteration: copies 30 + 40 µs exposed, all-gather 100 µs exposed -> 70 / 170
    assert ev["exposed_copy_ns"] == 3 * 70_000 and ev["exposed_comm_ns"] == 3 * 100_000
    assert abs(ev["share_of_exposed_window"] - 70 / 170) < 1e-12
    assert ev["n_copies"] == 6 and ev["streams"] == [sf.NCCL_STREAM]
    assert {c["copy"] for c in ev["top_copies"]} == {"CatArrayBatchedCopy", "split_with_sizes_copy"}


def test_copy_kernels_next_to_zero_length_collectives_are_silent():
    # a 1 ns all-gather between the copies still fires; one of start == end covers no time: no
    # exposed communication for the copies to extend, silent, no crash
    assert "copy-kernels-block-overlap" in ids(sf.copies("exposed", ag=1))
    assert "copy-kernels-block-overlap" not in ids(sf.copies("exposed", ag=0))


def test_copy_kernels_hidden_under_compute_are_silent():
    assert "copy-kernels-block-overlap" not in ids(sf.copies("hidden"))


def test_copy_kernels_far_from_collectives_are_silent():
    assert "copy-kernels-block-overlap" not in ids(sf.copies("far"))


def test_copy_kernels_are_not_compute_for_the_detectors():
    view = RankView(sf.copies("exposed"), FindingParams(), windows_of(sf.copies("exposed"), None,
                                                                     FindingParams().step_pattern))
    assert view.copy.sum() == 6 and not (view.copy & view.compute).any()


# --- launch-bound-gaps ----------------------------------------------------------------------

def test_launch_bound_gaps_fire_with_count_and_total():
    f = only(sf.launch_gaps("launch-bound"), "launch-bound-gaps")
    ev = f.evidence
    # 7 gaps of 30 µs between the 8 kernels of each iteration; plus the 2 gaps between iterations,
    # whose first kernel was launched (base - 90 µs) after the previous iteration's work ended
    assert ev["n_gaps"] == 3 * 7 + 2
    assert ev["gap_ns_median"] == 30_000


def test_gaps_with_work_already_queued_are_silent():
    t = sf.launch_gaps("queued")
    view = RankView(t, FindingParams(), windows_of(t, None, FindingParams().step_pattern))
    gaps = launch_bound_gaps(view)
    assert len(gaps) == 2  # only the two between iterations; the 21 inside were queued
    assert "launch-bound-gaps" not in ids(t)


def test_short_gaps_are_silent():
    assert "launch-bound-gaps" not in ids(sf.launch_gaps("launch-bound", gap=5_000))


def test_gaps_explained_by_a_host_sync_are_not_launch_bound():
    t = sf.pipeline("host-sync")
    view = RankView(t, FindingParams(), windows_of(t, None, FindingParams().step_pattern))
    assert launch_bound_gaps(view).empty


# --- comm-slowed-by-overlap -----------------------------------------------------------------

def test_collective_slower_when_overlapped_fires():
    f = only(sf.slowed("contended"), "comm-slowed-by-overlap")
    c = f.evidence["collectives"][0]
    assert (c["collective"], c["size"], c["n_alone"], c["n_overlapped"]) == ("AllGather", 1 << 20, 6, 6)
    assert (c["median_alone_ns"], c["median_overlapped_ns"]) == (100_000, 150_000)
    assert abs(c["slowdown"] - 0.5) < 1e-12


def test_equal_durations_are_silent_but_still_compared():
    t = sf.slowed("equal")
    assert "comm-slowed-by-overlap" not in ids(t)
    view = RankView(t, FindingParams(), windows_of(t, None, FindingParams().step_pattern))
    cmp_ = comm_overlap_comparison(view)
    assert cmp_[["n_alone", "n_overlapped"]].values.tolist() == [[6, 6]] and cmp_["slowdown"].iloc[0] == 0.0


def test_too_few_samples_or_other_sizes_are_silent():
    # both are 50% slower overlapped; 2 alone samples < 3, and another size is another collective
    assert "comm-slowed-by-overlap" not in ids(sf.slowed("few"))
    assert "comm-slowed-by-overlap" in ids(sf.slowed("few"), FindingParams(slow_min_samples=2))
    assert "comm-slowed-by-overlap" not in ids(sf.slowed("mixed-sizes"))


def test_waiting_for_a_late_peer_is_not_taken_for_contention():
    # rank 0 starts its overlapped all-gathers 60 µs before rank 1: raw 160 vs 100 µs alone
    r0 = sf.slowed("equal", rank=0, peer_lead=60_000)
    assert "comm-slowed-by-overlap" in ids(r0)  # alone, the wait looks like slowness
    r1 = sf.slowed("equal", rank=1)
    assert "comm-slowed-by-overlap" not in ids(sf.trace_set(r0, r1))  # from the last arrival: 100 vs 100
    off = FindingParams(slow_use_transfer_time=False)
    assert "comm-slowed-by-overlap" in ids(sf.trace_set(r0, r1), off)


# --- the engine -----------------------------------------------------------------------------

def test_findings_are_json_data_with_catalogue_fix():
    fs = detect_findings(sf.trace_set(sf.pipeline("host-sync")))
    d = json.loads(json.dumps([f.to_dict() for f in fs]))
    assert d[0]["id"] == "host-blocking-sync" and d[0]["fix"] == CATALOGUE["host-blocking-sync"].fix
    assert d[0]["start_ns"] < d[0]["end_ns"] and d[0]["severity"] == "warning"


def test_extra_findings_are_merged_and_sorted():
    late = Finding(id="late-peer", severity="critical", ranks=[1], title="rank 1 is late", explanation="x")
    fs = detect_findings(sf.trace_set(sf.copies("exposed")), extra=[late])
    assert [f.id for f in fs] == ["late-peer", "copy-kernels-block-overlap"]  # critical before warning


# --- comm-starved-by-compute ----------------------------------------------------------------

def test_comm_kernel_dispatched_at_the_gemm_tail_is_starved():
    f = only(sf.starved("starved"), "comm-starved-by-compute")
    ev = f.evidence
    # eligible at base (the 50 µs kernel ends there; launched long before), started at base + 1.3 ms
    assert ev["n_kernels"] == 3 and ev["delay_ns_total"] == 3 * 1_300_000 and ev["delay_ns_median"] == 1_300_000
    # the GEMM runs base + 2 µs .. base + 1.4 ms: the comm kernel starts 100 µs before its end
    assert ev["largest"][0]["started_before_blocker_end_ns"] == 100_000
    assert ev["blockers"] == [{"name": GEMM, "n": 3, "delay_ns": 3_900_000}]
    # 3.9 ms of 3 × 1.95 ms analysed windows: critical
    assert f.severity == Severity.critical and f.ranks == [0]
    assert f.title == f"rank 0: 3 comm kernels waited 3.900 ms for SMs held by {GEMM}"


@pytest.mark.parametrize("variant", ["first", "dependency", "other-stream", "late-launch"])
def test_comm_kernel_not_starved_when_a_dependency_or_the_host_explains_its_start(variant):
    assert "comm-starved-by-compute" not in ids(sf.starved(variant))


def test_zero_length_comm_kernels_are_never_starved():
    # the starved schedule with 1 ns comm kernels still fires: eligible at base, started at
    # base + 1.3 ms inside the GEMM, 3 x 1.3 ms; with comm kernels of start == end (no time taken)
    # nothing at all fires (it used to report 3 kernels, 3.900 ms, critical)
    one_ns = only(sf.starved("starved", comm=1), "comm-starved-by-compute")
    assert one_ns.evidence["n_kernels"] == 3 and one_ns.evidence["delay_ns_total"] == 3 * 1_300_000
    assert ids(sf.starved("starved", comm=0)) == []


def _first_and_extra_comm(extra_ns: int):
    """starved('first') (the 4 µs comm kernel runs base + 1 .. 5 µs, before the GEMM: healthy),
    plus a comm kernel of extra_ns at base + 700 µs on the NCCL stream, inside the GEMM."""
    b = sf.Builder()
    for i in range(3):
        base = sf.iteration(b, i)
        b.kernel(base - 50_000, base, sf.MAIN_STREAM, GEMM)
        b.kernel(base + 2_000, base + 1_400_000, sf.MAIN_STREAM, GEMM)
        b.kernel(base + 1_000, base + 5_000, sf.NCCL_STREAM, COMM)
        b.kernel(base + 700_000, base + 700_000 + extra_ns, sf.NCCL_STREAM, COMM)
    return b.build()


def test_zero_length_comm_beside_real_comm_is_not_starved():
    # a 1 ns extra kernel: eligible at base + 5 µs (the real one ended), started at base + 700 µs
    # under the GEMM: 3 x 695 µs = 2.085 ms starved; of start == end: silent, the real one too
    f = only(_first_and_extra_comm(1), "comm-starved-by-compute")
    assert f.evidence["n_kernels"] == 3 and f.evidence["delay_ns_total"] == 3 * 695_000
    assert ids(_first_and_extra_comm(0)) == []


def test_zero_length_compute_starves_nothing():
    # a GEMM of start == end at base + 2 µs holds no SMs: the comm kernel at base + 1.3 ms had
    # nothing running beside it; the 1.398 ms GEMM is the look-alike that fires
    assert "comm-starved-by-compute" in ids(sf.starved("starved"))
    assert ids(sf.starved("starved", gemm=0)) == []


def test_comm_starved_needs_a_total_delay():
    # one iteration, 80 µs late: above the 50 µs per-kernel floor, below the 100 µs total
    t = sf.starved("starved", iterations=1, at=80_000)
    assert "comm-starved-by-compute" not in ids(t)
    assert "comm-starved-by-compute" in ids(t, FindingParams(starve_min_total_ns=50_000))


def test_every_detector_id_is_in_the_catalogue_and_covered_here():
    assert DETECTED_HERE <= set(CATALOGUE)
    fired = set()
    for t in (sf.pipeline("host-sync"), sf.pipeline("serialized"), sf.front_loaded("front-loaded"),
              sf.copies("exposed"), sf.launch_gaps("launch-bound"), sf.slowed("contended"), sf.starved("starved")):
        fired |= set(ids(t))
    assert fired == DETECTED_HERE


def test_metrics_windows_honour_step_selection():
    t = sf.pipeline("serialized")
    m = rank_metrics(t, AnalysisOptions(steps=StepSelection.parse("2")))
    fs = detect_findings(sf.trace_set(t), metrics={0: m})
    f = [x for x in fs if x.id == "serialized-streams"][0]
    assert f.evidence["n_iterations"] == 1 and f.evidence["stream_wait_event_calls_per_iteration"] == {"2": 8}


def test_fail_on_ids():
    fs = detect_findings(sf.trace_set(sf.pipeline("host-sync")))
    assert findings_present(fs, ["host-blocking-sync", "late-peer"]) == ["host-blocking-sync"]
    assert findings_present(detect_findings(sf.trace_set(sf.pipeline("overlapped"))), ["host-blocking-sync"]) == []
    with pytest.raises(ValueError, match="unknown finding"):
        findings_present(fs, ["no-such-finding"])


def test_every_threshold_is_documented():
    docs = FindingParams.field_docs()
    assert len(docs) >= 20
    for name, (_default, doc) in docs.items():
        assert doc, f"FindingParams.{name} has no docstring"


def test_thresholds_change_the_decision():
    t = sf.copies("exposed")  # share 70/170 = 0.41
    assert "copy-kernels-block-overlap" in ids(t, FindingParams(copy_min_share=0.40))
    assert "copy-kernels-block-overlap" not in ids(t, FindingParams(copy_min_share=0.42))
    # the syncs during comm idle exactly 10 µs; only the last one of each iteration (called after
    # its all-gather ended) idles longer, and alone it does not put an iteration in the region
    host_sync = sf.trace_set(sf.pipeline("host-sync"))
    assert "host-blocking-sync" in ids(host_sync, replace(FindingParams(), sync_min_idle_ns=10_000))
    assert "host-blocking-sync" not in ids(host_sync, replace(FindingParams(), sync_min_idle_ns=10_001))


def test_empty_and_comm_free_traces_have_no_findings():
    from .synth import rank_trace

    assert detect_rank(rank_trace([])) == []
    assert ids(rank_trace([(0, 10, 0, GEMM), (20, 30, 0, GEMM)])) == []
    assert ids(rank_trace([(0, 10, 1, COMM)])) == []


# --- rendering ------------------------------------------------------------------------------

def test_findings_render_as_table_and_markdown():
    from rich.console import Console

    from analyzers.findings.finding import SEVERITY_ORDER
    from analyzers.syncs.summary import syncs_document
    from overlapscope.render_findings import (
        SEVERITY_RANK,
        findings_markdown,
        findings_table,
        syncs_table,
    )

    assert SEVERITY_RANK == {str(k): v for k, v in SEVERITY_ORDER.items()}
    ts = sf.trace_set(sf.pipeline("host-sync"), sf.pipeline("serialized", rank=1))
    fs = [f.to_dict() for f in detect_findings(ts)]  # the renderers draw the JSON document
    assert [f["id"] for f in fs] == ["serialized-streams", "host-blocking-sync"]  # critical before warning
    table = findings_table(fs)
    assert table.row_count == 2
    console = Console(width=200, record=True)
    console.print(table)
    text = console.export_text()
    assert "host-blocking-sync" in text and "serialized-streams" in text
    md = findings_markdown(fs)
    assert md.count("**Fix:**") == 2 and "- n\\_syncs: `11`" in md
    syncs = trace_set_syncs(ts)
    section = syncs_document({int(r): df for r, df in syncs.groupby("rank")})
    summary = section["groups"]
    assert [[g["rank"], g["api"], g["n"]] for g in summary] == [[0, "cudaStreamSynchronize", 12]]
    assert section["n"] == 12 == len(syncs) and len(section["rows"]) == 12
    assert section["host_blocked_ns"] == int(syncs["host_blocked_ns"].sum())
    assert syncs_table(section).row_count == 1
    assert findings_table([]).row_count == 1 and "No cause" in findings_markdown([])
    priced = [dict(fs[0], saving_ns=547_430, saving_fraction=0.126), dict(fs[1], saving_ns=-2_041_306,
                                                                          saving_fraction=-0.0368)]
    console = Console(width=200, record=True)
    console.print(findings_table(priced))
    text = console.export_text()
    assert "0.547 ms" in text and "12.6%" in text  # a saving
    assert "replay +2.041 ms" in text and "-2.041" not in text and "-3.7%" not in text  # a longer replay: none


# --- the runners' real traces (sample_traces/, 2 x H200) -------------------------------------

def _sample(name: str):
    """(TraceSet, manifest) of one sample run; expected counts come from its manifest."""
    import glob

    from analyzers.io.load import load_traces

    from .conftest import SAMPLES

    d = SAMPLES / name
    if not (d / "manifest.json").is_file():
        pytest.fail(f"sample traces missing at {d}: they are committed with the repository")
    files = sorted(glob.glob(str(d / "rank?.json.gz")) + glob.glob(str(d / "rank*.sqlite")))
    return load_traces(files), json.loads((d / "manifest.json").read_text())


def _by_id(fs: list[Finding], fid: str) -> dict[int, Finding]:
    return {f.ranks[0]: f for f in fs if f.id == fid}


def test_real_ag_gemm_host_sync_one_sync_per_step_per_iteration():
    ts, man = _sample("ag-gemm/host-sync")
    steps, iters = man["params"]["steps"], man["params"]["profile_steps"]
    fs = detect_findings(ts)
    found = _by_id(fs, "host-blocking-sync")
    assert sorted(found) == ts.rank_ids()
    syncs = trace_set_syncs(ts)
    for r, f in found.items():
        ev = f.evidence
        # every step's sync but the very last one, after which nothing is launched (no idle caused)
        assert ev["n_syncs"] == steps * iters - 1
        assert ev["syncs_per_iteration"] == {str(i): steps - (i == iters) for i in range(1, iters + 1)}
        assert ev["apis"] == {"cudaStreamSynchronize": steps * iters - 1}
        mine = syncs[(syncs["rank"] == r) & (syncs["api"] == "cudaStreamSynchronize")]
        assert len(mine) == steps * iters and mine["confirmed"].all()  # cuda_sync records agree
        assert int((mine["gpu_idle_ns"] > 0).sum()) == steps * iters - 1
        assert ev["gpu_idle_ns_total"] == int(mine["gpu_idle_ns"].sum()) > 0
        assert f.severity == Severity.critical
    # the profiler's own cudaDeviceSynchronize after the last step is a blocking sync, never counted
    assert (syncs["api"] == "cudaDeviceSynchronize").sum() == len(ts)
    assert "serialized-streams" not in {f.id for f in fs}  # the host, not the streams, serialized it


def test_real_ag_gemm_sync_before_loop_has_no_sync_or_serialization_finding():
    ts, _ = _sample("ag-gemm/sync-before-loop")
    got = {f.id for f in detect_findings(ts)}
    assert not got & {"host-blocking-sync", "serialized-streams", "front-loaded-collectives"}


def test_real_ag_gemm_sync_in_loop_serializes_its_streams():
    ts, man = _sample("ag-gemm/sync-in-loop")
    found = _by_id(detect_findings(ts), "serialized-streams")
    assert sorted(found) == ts.rank_ids()
    for f in found.values():
        ev = f.evidence
        assert len(ev["streams"]) == man["params"]["streams"]  # the two worker streams
        assert ev["comm_streams"] == ev["streams"]  # torch 2.11 runs NCCL on the worker stream
        assert ev["n_iterations_serialized"] == man["params"]["profile_steps"]
        assert ev["concurrent_ns"] <= 0.05 * min(ev["busy_ns_per_stream"].values())
        assert ev["stream_wait_event_calls_per_iteration"]  # the waits inside the loop are shown


def test_real_ag_gemm_nsys_pair_agrees_with_kineto():
    ts, _ = _sample("ag-gemm-nsys/sync-in-loop")
    assert sorted(_by_id(detect_findings(ts), "serialized-streams")) == ts.rank_ids()
    ts, _ = _sample("ag-gemm-nsys/sync-before-loop")
    assert "serialized-streams" not in {f.id for f in detect_findings(ts)}


def test_real_ag_gemm_baseline_is_not_misdiagnosed():
    ts, _ = _sample("ag-gemm/baseline")
    got = {f.id for f in detect_findings(ts)}
    assert not got & {"serialized-streams", "front-loaded-collectives", "host-blocking-sync"}


def test_real_fsdp_front_loaded_fires_and_zero3_does_not():
    ts, man = _sample("fsdp/front-loaded")
    found = _by_id(detect_findings(ts), "front-loaded-collectives")
    assert sorted(found) == ts.rank_ids()
    for f in found.values():
        ev = f.evidence
        assert ev["collective"] == "AllGather" and ev["share_before_compute_median"] >= 0.75
        assert ev["collectives_before_compute_median"] >= man["params"]["layers"]  # one per block (+ root)
        assert ev["n_iterations_front_loaded"] == man["params"]["profile_steps"]
    for variant in ("zero3", "zero3-prefetch", "zero3-no-prefetch", "zero2", "zero2-no-prefetch", "baseline"):
        ts, _ = _sample(f"fsdp/{variant}")
        assert "front-loaded-collectives" not in {f.id for f in detect_findings(ts)}, variant


def test_real_comm_starved_by_the_gemm_that_holds_every_sm():
    # in ProfilerStep#2 each rank's barrier started only at its local GEMM's tail
    ts, _ = _sample("ag-gemm-race/tuned-no-gate")
    found = _by_id(detect_findings(ts), "comm-starved-by-compute")
    assert sorted(found) == ts.rank_ids()
    for f in found.values():
        ev = f.evidence
        assert ev["n_kernels"] == 1 and ev["delay_ns_total"] > 1_000_000  # 1.33 and 1.54 ms
        (worst,) = ev["largest"]
        assert worst["name"] == "c10d::symmetric_memory::barrier_kernel"
        assert 0 < worst["started_before_blocker_end_ns"] < 200_000  # the GEMM's tail
        assert "coopB" in ev["blockers"][0]["name"]
    # the same schedule behind the comm-first gate: the barrier always goes first
    ts, _ = _sample("ag-gemm/tuned")
    assert "comm-starved-by-compute" not in {f.id for f in detect_findings(ts)}


def test_real_nccl_all_gathers_starved_by_the_other_workers_gemm():
    """sync-before-loop: step s+1's all-gather is ready when its stream's GEMM ends, but the other
    worker's GEMM holds the SMs; it starts at that GEMM's tail (why this variant hides only 31-56%)."""
    ts, _ = _sample("ag-gemm/sync-before-loop")
    found = _by_id(detect_findings(ts), "comm-starved-by-compute")
    assert sorted(found) == ts.rank_ids()
    for r, f in found.items():
        n_all_gathers = int((ts.ranks[r].gpu["category"] == "comm").sum())
        assert 1 <= f.evidence["n_kernels"] <= n_all_gathers
        for k in f.evidence["largest"]:
            assert k["name"].startswith("ncclDevKernel_AllGather") and k["delay_ns"] >= 50_000
            assert 0 < k["started_before_blocker_end_ns"] < 200_000
    for variant in ("baseline", "sync-in-loop", "host-sync"):  # NCCL never beside a GEMM there
        ts, _ = _sample(f"ag-gemm/{variant}")
        assert "comm-starved-by-compute" not in {f.id for f in detect_findings(ts)}, variant


def test_real_comm_slowed_compares_the_same_all_gather_alone_and_overlapped():
    ts, man = _sample("ag-gemm/sync-before-loop")
    w = man["workload"]
    size = w["m"] * w["K"]  # each rank's all-gather input: m rows of K
    params = FindingParams()
    eff = transfer_starts(ts, params)
    for r in ts.rank_ids():
        t = ts.ranks[r]
        view = RankView(t, params, windows_of(t, None, params.step_pattern))
        cmp_ = comm_overlap_comparison(view, eff[r]).set_index(["collective", "size"])
        row = cmp_.loc[("AllGather", size)]
        # step 0's all-gather of each iteration runs before any GEMM: the 'alone' samples
        assert row["n_alone"] >= man["params"]["profile_steps"] and row["n_overlapped"] >= 1
        assert row["median_overlapped_ns"] > row["median_alone_ns"]
    fs = _by_id(detect_findings(ts), "comm-slowed-by-overlap")
    assert fs, "the all-gathers run measurably slower beside the GEMM on at least one rank"
    for f in fs.values():
        c = f.evidence["collectives"][0]
        assert (c["collective"], c["size"]) == ("AllGather", size)
        assert c["slowdown"] >= params.slow_min_slowdown and f.evidence["measured_from"] == "last rank's arrival"
    for variant in ("host-sync", "sync-in-loop", "baseline"):  # never overlapped: nothing to compare
        ts, _ = _sample(f"ag-gemm/{variant}")
        assert "comm-slowed-by-overlap" not in {f.id for f in detect_findings(ts)}, variant


# --- the CI gate ------------------------------------------------------------------------------

def _cli(*args: str):
    from .inprocess import cli

    return cli(*args)


def test_fail_on_gate_catches_the_schedule_that_lost_all_overlap():
    # sync-in-loop is what a change that silently serialized the pipeline looks like: overlap 0
    bad = _cli("analyze", "sample_traces/ag-gemm/sync-in-loop", "--fail-on", "serialized-streams",
               "--fail-on", "host-blocking-sync")
    assert bad.returncode == 1, bad.stderr
    assert "serialized-streams" in bad.stderr and "host-blocking-sync" not in bad.stderr.split("gate")[-1]
    good = _cli("analyze", "sample_traces/ag-gemm/sync-before-loop", "--fail-on", "serialized-streams",
                "--fail-on", "host-blocking-sync")
    assert good.returncode == 0, good.stderr
    hs = _cli("analyze", "sample_traces/ag-gemm/host-sync", "--fail-on", "host-blocking-sync", "--format", "json")
    assert hs.returncode == 1
    doc = json.loads(hs.stdout)
    assert {f["id"] for f in doc["findings"]} >= {"host-blocking-sync"}
    assert doc["syncs"]["n"] == sum(v["n"] for v in doc["syncs"]["per_rank"].values()) > 0
    assert doc["syncs"]["n"] == sum(g["n"] for g in doc["syncs"]["groups"])


# --- comm-starved-by-compute against a brute-force reference ---------------------------------

def _starved_by_brute_force(t, params: FindingParams) -> list[tuple[int, int, int]]:
    """(start, eligible, delay) of each starved comm kernel, straight from the definition."""
    g = t.gpu
    s, e, stream = g["start_ns"].to_numpy(), g["end_ns"].to_numpy(), g["stream"].to_numpy()
    cat, launch = g["category"].to_numpy(), launch_times(t)
    out = []
    for i in range(len(g)):
        if cat[i] != "comm" or launch[i] < 0 or e[i] <= s[i]:  # zero length: took no time
            continue
        prev = [e[j] for j in range(len(g)) if stream[j] == stream[i] and s[j] < s[i]]
        ended = [e[j] for j in range(len(g)) if e[j] < s[i]]
        eligible = max([launch[i], max(prev, default=-1), max(ended, default=-1)])
        if s[i] - eligible < params.starve_min_delay_ns or not ended:  # nothing ended before: censored
            continue
        if any(cat[j] == "compute" and stream[j] != stream[i] and s[j] <= eligible + params.starve_blocker_slack_ns
               and e[j] > s[i] for j in range(len(g))):
            out.append((int(s[i]), int(eligible), int(s[i] - eligible)))
    return sorted(out)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 30), st.sampled_from([1, 2, 3]), st.booleans(),
                          st.integers(0, 40)), min_size=1, max_size=14))
def test_starved_comm_kernels_match_the_definition(spec):
    """Random kernels on 3 streams (10 µs grid, some of zero length; comm or compute; launched some
    time before their start): the sorted running maxima give the same kernels, eligibility and
    delays as the O(n²) definition, and every named blocker was still running when its comm kernel
    started."""
    b = sf.Builder()
    b.steps.append((1, 0, 10_000_000))
    for start, dur, stream, is_comm, lead in spec:
        s0 = 1_000_000 + start * 10_000
        b.kernel(s0, s0 + dur * 10_000, stream, COMM if is_comm else GEMM, launch=s0 - lead * 10_000)
    t = b.build()
    params = FindingParams()
    view = RankView(t, params, pd.DataFrame({"lo": [0], "hi": [10_000_000]}))
    got = starved_comm_kernels(view)
    assert sorted(zip(got["start_ns"], got["eligible_ns"], got["delay_ns"], strict=True)) == \
        _starved_by_brute_force(t, params)
    assert (got["blocker_end_ns"] > got["start_ns"]).all()


def test_transfer_starts_by_hand():
    """Two ranks, two all-reduces each (same size) and one reduce-scatter on rank 0 only. The n-th
    all-reduce moves data from its last rank's start, but never later than its own end; the
    reduce-scatter has no partner on rank 1 and keeps its own start; GEMMs keep theirs."""
    def rank(r: int, kernels: list[tuple[int, int, str]]):
        b = sf.Builder(rank=r)
        for start, end, name in kernels:
            b.kernel(start, end, sf.NCCL_STREAM if name != GEMM else sf.MAIN_STREAM, name, launch=10, size=64)
        return b.build()

    r0 = rank(0, [(100, 200, COMM), (300, 400, COMM), (500, 600, sf.RS), (50, 90, GEMM)])
    r1 = rank(1, [(250, 260, COMM), (280, 405, COMM), (40, 95, GEMM)])
    eff = transfer_starts(sf.trace_set(r0, r1), FindingParams())
    # rows are in start order: r0 GEMM 50, AR 100, AR 300, RS 500; r1 GEMM 40, AR 250, AR 280
    # arrivals: 1st all-reduce max(100, 250) = 250, 2nd max(300, 280) = 300; end skews 60 and 5 ns
    assert list(eff[0]) == [50, min(250, 200), 300, 500]
    assert list(eff[1]) == [40, 250, 300]
    # clocks not shared (median end skew above the limit): every rank keeps its own starts
    eff = transfer_starts(sf.trace_set(r0, r1), FindingParams(slow_max_end_skew_ns=30))
    assert list(eff[0]) == [50, 100, 300, 500] and list(eff[1]) == [40, 250, 280]
