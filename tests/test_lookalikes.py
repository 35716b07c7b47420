"""Look-alikes: every situation an ENTRY.look_alikes names, built by hand, keeps its finding silent;
next to each, the smallest change that makes it the real thing fires it (so the silent test can fail).

Covers the look-alikes that tests/test_findings.py, tests/test_precision.py and
tests/test_crossrank.py do not already build (the table in each test's docstring says which one).
Times in ns; the figures are worked out in the comments from the schedules' constants.
"""

from __future__ import annotations

from analyzers.crossrank import CrossRankParams, analyze_cross_rank
from analyzers.findings import cross_rank_findings, detect_findings, trace_set_syncs
from analyzers.findings.finding import Finding

from . import synth_findings as sf
from .synth import COMM, GEMM
from .synth_multi import ALLGATHER, ALLREDUCE, GEMM_B, PTOP, US, K, RankSpec, collective_run, trace_set

ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def found(trace, fid: str, **params) -> list[Finding]:
    from analyzers.findings.registry import FindingParams

    return [f for f in detect_findings(sf.trace_set(trace), params=FindingParams(**params)) if f.id == fid]


def crossrank(ts, fid: str, **params) -> list[Finding]:
    rep = analyze_cross_rank(ts, params=CrossRankParams(**params))
    return [f for f in cross_rank_findings(rep) if f.id == fid]


# --- host-blocking-sync ---------------------------------------------------------------------

def _sync_before_the_collectives(*, in_flight: bool, sync_from: int = 10_000):
    """Per iteration: a 100 µs prologue GEMM [base, base + 100 µs]; the host calls
    cudaStreamSynchronize at base + sync_from, it returns at base + 102 µs (the GPU drained at
    base + 100 µs); the host then launches (base + 104 µs on) two all-gathers and two matmuls, the
    first starting at base + 110 µs: 8 µs of GPU idle after each sync. With in_flight, one more
    all-gather [base, base + 90 µs] was launched before the sync: communication in flight while
    the host waits."""
    b = sf.Builder()
    for i in range(3):
        base = sf.iteration(b, i)
        b.kernel(base, base + 100_000, sf.MAIN_STREAM, GEMM)
        if in_flight:
            b.kernel(base, base + 90_000, sf.NCCL_STREAM, COMM)
        b.call("cudaStreamSynchronize", base + sync_from, base + 102_000)
        b.kernel(base + 110_000, base + 210_000, sf.NCCL_STREAM, COMM, launch=base + 104_000)
        b.kernel(base + 210_000, base + 360_000, 1, GEMM, launch=base + 105_000)
        b.kernel(base + 210_000, base + 310_000, sf.NCCL_STREAM, COMM, launch=base + 106_000)
        b.kernel(base + 360_000, base + 510_000, 2, GEMM, launch=base + 107_000)
    return b.build()


def test_sync_before_all_of_the_iterations_communication_is_silent():
    """host-blocking-sync look-alike: 'syncs before ... all of an iteration's communication'."""
    t = _sync_before_the_collectives(in_flight=False)
    syncs = trace_set_syncs(sf.trace_set(t))
    # three blocking syncs, each followed by 8 µs of idle: blocking, but before any collective
    assert syncs["gpu_idle_ns"].tolist() == [8_000] * 3
    assert found(t, "host-blocking-sync") == []
    # the same sync while an all-gather is in flight: 3 x 8 µs = 24 µs >= the 20 µs total
    (f,) = found(_sync_before_the_collectives(in_flight=True), "host-blocking-sync")
    assert f.evidence["n_syncs"] == 3 and f.evidence["gpu_idle_ns_total"] == 24_000


def test_sync_after_the_last_collective_fires_once_it_overlaps_one():
    """host-blocking-sync look-alike: 'syncs ... after all of an iteration's communication (a
    loss.item() at step end)' (silent in test_findings.test_sync_after_all_communication_of_the_step_is_silent):
    started at 350 µs instead of 450 µs, while all-gather 4 [300, 400) µs is in flight, it fires."""
    assert found(sf.pipeline("overlapped", sync_at=("cudaStreamSynchronize", 450_000, 702_000)),
                 "host-blocking-sync") == []
    (f,) = found(sf.pipeline("overlapped", sync_at=("cudaStreamSynchronize", 350_000, 702_000)),
                 "host-blocking-sync")
    # the first two iterations' syncs: idle from 702 µs to the next iteration's first all-gather
    # (at base + 2 ms): 1.298 ms each, of which the 352 µs the call held the host are charged (the
    # host's own work after it made the rest); the last one is followed by nothing (no idle)
    syncs = trace_set_syncs(sf.trace_set(sf.pipeline("overlapped", sync_at=("cudaStreamSynchronize", 350_000,
                                                                             702_000))))
    assert syncs["gpu_idle_ns"].tolist() == [1_298_000, 1_298_000, 0]
    assert f.evidence["n_syncs"] == 2 and f.evidence["gpu_idle_ns_total"] == 2 * 352_000


def test_host_syncs_in_a_trace_without_communication_are_silent():
    """host-blocking-sync look-alike: 'traces without communication'. The host-sync schedule with
    its all-gathers replaced by GEMMs: the same blocking syncs and GPU idle, no overlap to lose."""
    t = sf.pipeline("host-sync", ag_name=GEMM)
    real = sf.pipeline("host-sync")
    idle = trace_set_syncs(sf.trace_set(t))["gpu_idle_ns"].tolist()
    assert idle == trace_set_syncs(sf.trace_set(real))["gpu_idle_ns"].tolist() and sum(idle) > 0
    assert found(t, "host-blocking-sync") == []
    assert len(found(real, "host-blocking-sync")) == 1


def _short_sync_then_late_host(sync_at: int, sync_end: int = 202_000):
    """Per iteration: an all-gather [base, base + 100 µs] beside a GEMM [base, base + 200 µs]; the
    host syncs from base + sync_at until base + sync_end, then launches the next all-gather only at
    base + 300 µs (it starts at base + 310 µs): GPU idle from base + 200 µs (or the sync's end)."""
    b = sf.Builder()
    for i in range(3):
        base = sf.iteration(b, i)
        b.kernel(base, base + 100_000, sf.NCCL_STREAM, COMM)
        b.kernel(base, base + 200_000, sf.MAIN_STREAM, GEMM)
        b.call("cudaStreamSynchronize", base + sync_at, base + sync_end)
        b.kernel(base + 310_000, base + 410_000, sf.NCCL_STREAM, COMM, launch=base + 300_000)
    return b.build()


def test_sync_that_held_the_host_briefly_is_not_charged_the_hosts_later_delay():
    """A sync that blocked the host 3 µs cannot have caused 108 µs of idle: without it the host
    would have gone on 3 µs earlier, and the next launch came 98 µs after it returned (the host's
    own delay, a launch-bound gap). Seen on tests/data/public/hta/trace_diff_control.json.gz (rank
    3: three aten::_local_scalar_dense syncs blocked 3-4 µs, charged 38-126 µs of idle)."""
    t = _short_sync_then_late_host(199_000)
    assert trace_set_syncs(sf.trace_set(t))["gpu_idle_ns"].tolist() == [108_000] * 3  # the syncs table
    assert found(t, "host-blocking-sync") == []
    # the gaps after them are the host's: 3 gaps [base + 200 µs, base + 310 µs) of 110 µs plus the 2
    # between iterations [base + 410 µs, next base) (the next iteration's work is launched at its
    # own base - 99 µs, after the last one ended)
    (gaps,) = found(t, "launch-bound-gaps")
    assert gaps.evidence["n_gaps"] == 5
    assert gaps.evidence["gap_ns_total"] == 3 * 110_000 + 2 * (sf.ITER - 410_000)
    # called at base + 150 µs the sync holds the host 52 µs: it is charged 52 µs of the 108 µs
    # the shape seen there: a sync on a side stream returns in 3 µs while the GEMM's queued work keeps
    # the GPU busy until base + 200 µs; the syncs table counts 110 µs of idle after that (to base +
    # 310 µs), none of it the sync's
    side = _short_sync_then_late_host(10_000, sync_end=13_000)
    assert trace_set_syncs(sf.trace_set(side))["gpu_idle_ns"].tolist() == [110_000] * 3
    assert found(side, "host-blocking-sync") == []
    (f,) = found(_short_sync_then_late_host(150_000), "host-blocking-sync")
    assert f.evidence["n_syncs"] == 3 and f.evidence["gpu_idle_ns_total"] == 3 * 52_000
    assert f.evidence["gpu_idle_ns_after_syncs_total"] == 3 * 108_000
    assert "0.168 ms of idle after them is the host's own delay" in f.explanation  # 3 x (108 - 52) µs


# --- serialized-streams ---------------------------------------------------------------------

def _chain(ag_stream: int):
    """Per iteration 4 x (all-gather 100 µs, then GEMM 150 µs) back to back: the all-gathers on
    ag_stream, the GEMMs on the main stream."""
    b = sf.Builder()
    for i in range(3):
        base = sf.iteration(b, i)
        for s in range(4):
            t = base + s * 250_000
            b.kernel(t, t + 100_000, ag_stream, COMM)
            b.kernel(t + 100_000, t + 250_000, sf.MAIN_STREAM, GEMM)
    return b.build()


def test_a_single_stream_is_not_serialized_streams():
    """serialized-streams look-alike: 'a single stream'. The chain on one stream is silent; its
    all-gathers on a stream of their own (still never beside a GEMM) make it fire."""
    assert found(_chain(sf.MAIN_STREAM), "serialized-streams") == []
    (f,) = found(_chain(sf.NCCL_STREAM), "serialized-streams")
    # per iteration 4 x 100 µs on the NCCL stream, 4 x 150 µs on the main stream, 7 switches
    assert f.evidence["busy_ns_per_stream"] == {"7": 3 * 600_000, "20": 3 * 400_000}
    assert f.evidence["stream_switches_median"] == 7 and f.evidence["concurrent_ns"] == 0


# --- front-loaded-collectives ---------------------------------------------------------------

def _backward(comm_first: bool):
    """Per iteration 6 GEMMs of 80 µs back to back and 6 all-reduces of 60 µs. DDP (not comm_first):
    all-reduce j starts when GEMM j ends, beside GEMM j + 1. comm_first: the all-reduces run back
    to back first (70 µs apart), the GEMMs from base + 420 µs."""
    b = sf.Builder()
    for i in range(3):
        base = (i + 1) * 2 * sf.ITER
        b.steps.append((i + 1, base - 100_000, base + 2 * sf.ITER - 150_000))
        g0 = base + 420_000 if comm_first else base
        for j in range(6):
            b.kernel(g0 + j * 80_000, g0 + (j + 1) * 80_000, sf.MAIN_STREAM, GEMM)
            a = base + j * 70_000 if comm_first else g0 + (j + 1) * 80_000
            b.kernel(a, a + 60_000, sf.NCCL_STREAM, ALL_REDUCE)
    return b.build()


def test_collectives_after_compute_starts_are_not_front_loaded():
    """front-loaded-collectives look-alike: 'collectives after compute (DDP)'."""
    assert found(_backward(comm_first=False), "front-loaded-collectives") == []
    (f,) = found(_backward(comm_first=True), "front-loaded-collectives")
    # all 6 all-reduces (6 x 60 µs) end before compute starts at base + 420 µs
    assert f.evidence["share_before_compute_median"] == 1.0
    assert f.evidence["comm_before_compute_ns_total"] == 3 * 6 * 60_000


# --- copy-kernels-block-overlap -------------------------------------------------------------

def test_copies_on_a_side_stream_of_their_own_are_silent():
    """copy-kernels-block-overlap look-alike: 'copies on a side stream of their own'. The exposed
    pack / unpack copies moved from the NCCL stream to stream 30 (no collective, no compute)."""
    assert found(sf.copies("exposed", copy_stream=30), "copy-kernels-block-overlap") == []
    (f,) = found(sf.copies("exposed"), "copy-kernels-block-overlap")
    assert f.evidence["streams"] == [sf.NCCL_STREAM]


def test_copies_small_next_to_the_exposed_communication_are_silent():
    """copy-kernels-block-overlap look-alike: 'copies small next to the exposed communication'.
    Copies of 5 + 5 µs beside a 100 µs exposed all-gather: 10 / 110 = 9% < 15%; of 8 + 10 µs:
    18 / 118 = 15.3% fires."""
    assert found(sf.copies("exposed", copy_in=5_000, copy_out=5_000), "copy-kernels-block-overlap") == []
    (f,) = found(sf.copies("exposed", copy_in=8_000, copy_out=10_000), "copy-kernels-block-overlap")
    assert f.evidence["exposed_copy_ns"] == 3 * 18_000 and f.evidence["exposed_comm_ns"] == 3 * 100_000


# --- launch-bound-gaps ----------------------------------------------------------------------

def test_few_launch_bound_gaps_are_silent():
    """launch-bound-gaps look-alike: 'few gaps'. One iteration of 3 kernels: 2 gaps of 30 µs
    (below launch_min_gaps = 3); one kernel more makes 3 gaps."""
    assert found(sf.launch_gaps("launch-bound", iterations=1, n=3), "launch-bound-gaps") == []
    (f,) = found(sf.launch_gaps("launch-bound", iterations=1, n=4), "launch-bound-gaps")
    assert f.evidence["n_gaps"] == 3 and f.evidence["gap_ns_total"] == 3 * 30_000


def test_gaps_without_launch_records_are_silent():
    """launch-bound-gaps look-alike: 'traces without launch records'. The launch-bound schedule
    with its cudaLaunchKernel calls dropped: the same gaps, nothing says who was late."""
    assert found(sf.launch_gaps("launch-bound", launches=False), "launch-bound-gaps") == []
    assert len(found(sf.launch_gaps("launch-bound"), "launch-bound-gaps")) == 1


def test_gaps_in_a_trace_without_communication_are_silent():
    """launch-bound-gaps look-alike: 'traces ... without communication'. The launch-bound schedule
    with its all-gather replaced by a GEMM: no overlap for the gaps to cost."""
    assert found(sf.launch_gaps("launch-bound", tail=GEMM), "launch-bound-gaps") == []
    assert len(found(sf.launch_gaps("launch-bound"), "launch-bound-gaps")) == 1


# --- comm-slowed-by-overlap -----------------------------------------------------------------

def test_collectives_never_alone_or_never_overlapped_are_silent():
    """comm-slowed-by-overlap look-alikes: 'collectives never seen alone or never overlapped' and
    'too few samples on either side' (the overlapped side here; the alone side in test_findings)."""
    assert found(sf.slowed("contended", n_alone=0), "comm-slowed-by-overlap") == []
    assert found(sf.slowed("contended", n_over=0), "comm-slowed-by-overlap") == []
    assert found(sf.slowed("contended", n_over=2), "comm-slowed-by-overlap") == []
    # 6 alone (100 µs) and 3 overlapped (150 µs): 50% slower
    (f,) = found(sf.slowed("contended", n_over=3), "comm-slowed-by-overlap")
    c = f.evidence["collectives"][0]
    assert (c["n_alone"], c["n_overlapped"], c["median_alone_ns"], c["median_overlapped_ns"]) == (6, 3, 100_000,
                                                                                                  150_000)


# --- comm-starved-by-compute ----------------------------------------------------------------

def _held_back(name: str, kind: str):
    """starved('starved')'s schedule with the 4 µs transfer given as `name` of `kind`: eligible at
    base, started at base + 1.3 ms inside a GEMM [base + 2 µs, base + 1.4 ms]."""
    b = sf.Builder()
    for i in range(3):
        base = sf.iteration(b, i)
        b.kernel(base - 50_000, base, sf.MAIN_STREAM, GEMM)
        b.kernel(base + 2_000, base + 1_400_000, sf.MAIN_STREAM, GEMM)
        b.kernel(base + 1_300_000, base + 1_304_000, sf.NCCL_STREAM, name, kind=kind)
    return b.build()


def test_copy_engine_transfers_are_never_starved():
    """comm-starved-by-compute look-alike: 'copies'. A peer-to-peer memcpy (copy engine, no SMs)
    late under a GEMM is communication, but no GEMM can hold it back; the same transfer as a comm
    kernel fires."""
    t = _held_back(PTOP, "memcpy")
    assert t.gpu["category"].tolist()[-1] == "comm"
    assert found(t, "comm-starved-by-compute") == []
    (f,) = found(_held_back(COMM, "kernel"), "comm-starved-by-compute")
    assert f.evidence["n_kernels"] == 3 and f.evidence["delay_ns_total"] == 3 * 1_300_000


# --- cross-rank-order-mismatch --------------------------------------------------------------

def _swap(c_start_r1: int, long_all_gather: int = 0):
    """Rank 0 starts a GEMM on stream 7 before a GEMM_B on stream 9, rank 1 the other way round
    (a swap); then an all-reduce on stream 7, at 120 µs on rank 0 and at c_start_r1 on rank 1 (the
    swap delayed rank 1: rank 0 waits c_start_r1 - 120 µs). long_all_gather: an all-gather of that
    length on both ranks 50 µs after the all-reduce ends (matched, no wait)."""
    end = c_start_r1 + 100 * US
    specs = {}
    for r, (x, y, c) in {0: ((0, 100 * US), (10 * US, 300 * US), 120 * US),
                         1: ((10 * US, 100 * US), (0, 300 * US), c_start_r1)}.items():
        ks = [K(*x, 7, GEMM), K(*y, 9, GEMM_B), K(c, end, 7, ALLREDUCE)]
        if long_all_gather:
            ks.append(K(end + 50 * US, end + 50 * US + long_all_gather, 7, ALLGATHER))
        specs[r] = RankSpec(ks, hostname="h")
    return trace_set(specs, world_size=2)


def test_order_swap_with_a_wait_below_the_minimum_is_silent():
    """cross-rank-order-mismatch look-alike: a swap whose wait is 'below mismatch_min_wait_ns'
    (50 µs): rank 0 waits 40 µs; 55 µs fires (55 / (155 + 100) = 22% of the collective time)."""
    assert crossrank(_swap(160 * US), "cross-rank-order-mismatch") == []
    (f,) = crossrank(_swap(175 * US), "cross-rank-order-mismatch")
    assert f.evidence["wait_caused_ns"] == 55 * US


def test_order_swap_with_a_wait_small_against_the_collective_time_is_silent():
    """cross-rank-order-mismatch look-alike: a swap whose wait is 'below mismatch_min_wait_fraction'
    (5%) of the two ranks' collective kernel time: 60 µs of 160 + 100 µs of all-reduce plus 2 x 3 ms
    of all-gather is 0.96%; without the all-gather, 60 / 260 = 23% fires."""
    assert crossrank(_swap(180 * US, long_all_gather=3_000 * US), "cross-rank-order-mismatch") == []
    (f,) = crossrank(_swap(180 * US), "cross-rank-order-mismatch")
    assert f.evidence["wait_caused_ns"] == 60 * US


# --- late-peer ------------------------------------------------------------------------------

def test_late_peer_below_the_wait_fraction_is_silent():
    """late-peer look-alike: peers' wait 'below late_peer_min_wait_fraction' (25%) of their
    collective kernel time, though above late_peer_min_wait_ns: rank 1 20 µs late at 6 all-reduces
    of 100 µs transfer: 120 µs of 720 µs (17%); 40 µs late: 240 of 840 µs (29%) fires."""
    def run(late_us: int):
        ts, _ = collective_run(2, arrivals={0: [0] * 6, 1: [late_us * US] * 6}, compute=[(500 * US, 900 * US)])
        return ts

    assert crossrank(run(20), "late-peer") == []
    (f,) = crossrank(run(40), "late-peer")
    assert f.ranks == [1, 0] and f.evidence["wait_caused_ns"] == 6 * 40 * US


def test_late_peer_below_the_wait_minimum_is_silent():
    """late-peer look-alike: peers' wait 'below late_peer_min_wait_ns' (50 µs), though 33% of their
    collective kernel time: rank 1 5 µs late at 6 all-reduces of 10 µs transfer (30 µs of 90 µs);
    10 µs late (60 µs of 120 µs) fires."""
    def run(late_us: int):
        ts, _ = collective_run(2, arrivals={0: [0] * 6, 1: [late_us * US] * 6}, transfer=10 * US,
                               compute=[(500 * US, 900 * US)])
        return ts

    assert crossrank(run(5), "late-peer") == []
    (f,) = crossrank(run(10), "late-peer")
    assert f.evidence["wait_caused_ns"] == 6 * 10 * US
