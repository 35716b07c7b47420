"""Metrics on hand-made intervals; every expected figure was worked out by hand (see comments)."""

from __future__ import annotations

from analyzers.overlap.metrics import AnalysisOptions, rank_metrics, window_metrics
from analyzers.timeline.iterations import StepSelection, gpu_step_windows

from .synth import COMM, GEMM, rank_trace


def test_same_stream_overlapping_kernels_counted_once():
    # comm [0,10) s1; compute [5,15) and [8,12) on s0 (overlap each other on the same stream)
    t = rank_trace([(0, 10, 1, COMM), (5, 15, 0, GEMM), (8, 12, 0, GEMM)])
    m = window_metrics(t.gpu)
    assert (m.comm_ns, m.compute_ns, m.overlap_ns) == (10, 10, 5)  # compute = |[5,15)| = 10
    assert m.overlap_ratio == 0.5 and m.exposed_comm_ns == 5
    assert m.hidden_fraction_of_min == 0.5  # 5 / min(10, 10)
    assert (m.span_ns, m.busy_ns, m.idle_ns) == (15, 15, 0)
    assert m.compute_compute_overlap_ns == 0  # both compute kernels on one stream


def test_window_clips_kernels_spanning_its_edges():
    t = rank_trace([(0, 10, 1, COMM), (5, 15, 0, GEMM), (8, 12, 0, GEMM)])
    m = window_metrics(t.gpu, 4, 12)
    # comm [4,10) = 6; compute [5,12) = 7; overlap [5,10) = 5
    assert (m.comm_ns, m.compute_ns, m.overlap_ns) == (6, 7, 5)
    assert abs(m.overlap_ratio - 5 / 6) < 1e-12
    assert m.exposed_comm_ns == 1 and m.hidden_fraction_of_min == 5 / 6
    assert (m.span_ns, m.idle_ns) == (8, 0)  # [4,12)


def test_idle_and_partial_overlap():
    # compute [0,10) and [20,30); comm [25,40): comm 15, compute 20, overlap 5
    t = rank_trace([(0, 10, 0, GEMM), (20, 30, 0, GEMM), (25, 40, 1, COMM)])
    m = window_metrics(t.gpu)
    assert (m.comm_ns, m.compute_ns, m.overlap_ns, m.exposed_comm_ns) == (15, 20, 5, 10)
    assert abs(m.overlap_ratio - 1 / 3) < 1e-12 and m.hidden_fraction_of_min == 5 / 15
    assert (m.span_ns, m.busy_ns, m.idle_ns) == (40, 30, 10)  # gap [10,20)


def test_zero_length_kernels_cover_nothing():
    t = rank_trace([(5, 5, 1, COMM), (0, 10, 0, GEMM), (3, 3, 0, GEMM)])
    m = window_metrics(t.gpu)
    assert m.comm_ns == 0 and m.n_comm == 1
    assert m.overlap_ratio is None  # no comm time: undefined, not NaN, not a crash
    assert m.hidden_fraction_of_min is None
    assert m.compute_ns == 10


def test_rank_without_comm_is_undefined_not_nan():
    t = rank_trace([(0, 10, 0, GEMM)])
    rm = rank_metrics(t)
    assert rm.overlap_ratio is None
    d = rm.to_dict()
    assert d["overlap_ratio"] is None and d["exposed_comm_ns"] == 0
    assert any("no communication" in n for n in rm.notes)


def test_compute_compute_overlap_and_stream_pairs():
    # compute [0,10) s0, [5,20) s1, [8,9) s0: two streams both computing during [5,10) = 5
    t = rank_trace([(0, 10, 0, GEMM), (5, 20, 1, GEMM), (8, 9, 0, GEMM), (30, 35, 2, COMM)])
    rm = rank_metrics(t)
    assert rm.whole.compute_compute_overlap_ns == 5
    pairs = rm.stream_pairs
    assert pairs.loc[0, 0] == 10 and pairs.loc[1, 1] == 15 and pairs.loc[0, 1] == 5
    assert pairs.loc[2, 0] == 0 and pairs.loc[2, 2] == 5
    streams = rm.streams.set_index("stream")
    assert streams.loc[1, "busy_ns"] == 15 and streams.loc[2, "comm_ns"] == 5


def test_copies_and_sleep_kernels_are_neither_side():
    # DtoD memcpy and a spin kernel overlap the comm but are not compute; PtoP copy is comm
    t = rank_trace([
        (0, 10, 1, "Memcpy PtoP (Device -> Device)", "memcpy"),
        (0, 10, 0, "Memcpy DtoD (Device -> Device)", "memcpy"),
        (0, 10, 2, "at::cuda::(anonymous namespace)::spin_kernel(long)"),
        (5, 20, 0, GEMM),
    ])
    m = window_metrics(t.gpu)
    assert (m.comm_ns, m.compute_ns, m.overlap_ns) == (10, 15, 5)


def steps_trace():
    """Two steps. Host: step 1 [0,100), step 2 [100,200). Kernels launched at the given host times.

    step 1 kernels: comm [1000,1010) (launch 10), gemm [1005,1030) (launch 20)
    step 2 kernels: comm [1030,1060) (launch 110), gemm [1040,1050) (launch 120)
    GPU windows: step 1 = [1000, 1030) (until step 2's first start), step 2 = [1030, 1060).
    """
    return rank_trace(
        [(1000, 1010, 1, COMM, "kernel", 1), (1005, 1030, 0, GEMM, "kernel", 2),
         (1030, 1060, 1, COMM, "kernel", 3), (1040, 1050, 0, GEMM, "kernel", 4)],
        steps=[(1, 0, 100), (2, 100, 200)],
        launches=[(1, 10), (2, 20), (3, 110), (4, 120)],
    )


def test_iteration_windows_follow_launches():
    w = gpu_step_windows(steps_trace())
    assert w["step"].tolist() == [1, 2]
    assert w["gpu_start_ns"].tolist() == [1000, 1030] and w["gpu_end_ns"].tolist() == [1030, 1060]


def test_per_iteration_metrics_and_summary():
    rm = rank_metrics(steps_trace())
    it = rm.iterations.set_index("step")
    # step 1: comm 10, overlap [1005,1010) = 5 -> 0.5; step 2: comm 30, overlap 10 -> 1/3
    assert it.loc[1, "overlap_ns"] == 5 and it.loc[1, "overlap_ratio"] == 0.5
    assert it.loc[2, "overlap_ns"] == 10 and abs(it.loc[2, "overlap_ratio"] - 1 / 3) < 1e-12
    s = rm.iteration_summary
    assert s["n"] == 2 and s["worst_step"] == 2
    assert abs(s["overlap_ratio_median"] - (0.5 + 1 / 3) / 2) < 1e-12
    assert s["iteration_ns_worst"] == 30


def test_step_selection_restricts_window():
    rm = rank_metrics(steps_trace(), AnalysisOptions(steps=StepSelection.parse("2")))
    assert rm.whole.comm_ns == 30 and rm.whole.overlap_ns == 10
    assert rm.iterations["step"].tolist() == [2]


def test_like_hta_drops_last_step():
    rm = rank_metrics(steps_trace(), AnalysisOptions(like_hta=True))
    # only step 1's kernels remain: comm 10, compute [1005,1030) = 25, overlap 5
    assert (rm.whole.comm_ns, rm.whole.compute_ns, rm.whole.overlap_ns) == (10, 25, 5)


def test_step_selection_parse():
    sel = StepSelection.parse("2-4,7")
    assert sel.steps == ((2, 4), (7, 7))
    assert [s for s in range(10) if sel.keeps(s)] == [2, 3, 4, 7]
    assert sel.mask([1, 2, 4, 5, 7]).tolist() == [False, True, True, False, True]
    assert StepSelection.parse("5,3-4,1-2").steps == ((1, 5),)  # sorted and merged
    assert StepSelection.parse(None).steps is None
    # a range is never enumerated: what is missing comes back as ranges, checked against what is present
    assert StepSelection.parse("0-2000000000").missing([1, 2, 3]) == [(0, 0), (4, 2_000_000_000)]
    assert StepSelection.parse("1-3").missing([1, 2, 3]) == []
    for bad in ("x", "4-2", "99999999999999999999999", "1-9007199254740993", "²", "-1"):
        try:
            StepSelection.parse(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} accepted")


def test_step_windows_keep_ns_precision_at_epoch_scale():
    base = 1_700_000_000_123_456_789  # epoch ns: not representable exactly as float64
    t = rank_trace(
        [(base + 1000, base + 1010, 1, COMM, "kernel", 1), (base + 1031, base + 1060, 0, GEMM, "kernel", 2)],
        steps=[(1, base, base + 100), (2, base + 100, base + 200)],
        launches=[(1, base + 10), (2, base + 110)],
    )
    w = gpu_step_windows(t)
    assert w["gpu_end_ns"].tolist() == [base + 1031, base + 1060]
    assert w["gpu_start_ns"].tolist() == [base + 1000, base + 1031]
