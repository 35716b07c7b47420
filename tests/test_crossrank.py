"""Cross-rank analysis on hand-made 2- and 4-rank traces with known offsets, late ranks and
order swaps (tests/synth_multi.py), plus real multi-rank traces from tests/data/public and, once the
runners have produced them, the project's own sample traces."""

from __future__ import annotations

import json

import numpy as np
import pytest

from analyzers.crossrank import CrossRankParams, analyze_cross_rank, normalized_name
from analyzers.findings import cross_rank_findings
from analyzers.io.load import load_traces

from .conftest import NSYS_TRACES, SAMPLES
from .synth import GEMM
from .synth_multi import (
    ALLGATHER,
    ALLREDUCE,
    BARRIER,
    GEMM_B,
    TWO_STREAM_BASE,
    US,
    K,
    RankSpec,
    collective_run,
    trace_set,
    two_stream_run,
)

TOGETHER = {r: [0] * 6 for r in range(4)}


def _ids(findings, fid):
    return [f for f in findings if f.id == fid]


# --------------------------------------------------------------------------- clock alignment

def test_offsets_recovered_two_ranks_on_different_hosts():
    ts, _ = collective_run(2, arrivals={0: [0, 5, 0, 9, 0, 3], 1: [4, 0, 7, 0, 2, 0]},
                           offsets={1: 1_234_567}, hostnames={0: "node-a", 1: "node-b"})
    rep = analyze_cross_rank(ts)
    c = rep.clock
    assert not c.shared_clock and c.method == "matched-collective-ends"
    assert abs(c.offsets_ns[1] - 1_234_567) <= 1_000 and c.offsets_ns[0] == 0
    assert c.residual_skew_ns <= 1_000 and c.unaligned_skew_ns == 1_234_567
    assert rep.aligned.clock_offsets_ns == {0: 0, 1: c.offsets_ns[1]}


def test_offsets_recovered_four_ranks_and_input_untouched():
    # one offset (20 µs) below the shared-clock tolerance: different hosts still get estimated
    offsets = {1: 7_000 * US, 2: -3_333_333, 3: 20 * US}
    ts, _ = collective_run(4, arrivals={0: [0] * 6, 1: [5 * US] * 6, 2: [300 * US] * 6, 3: [10 * US] * 6},
                           offsets=offsets, hostnames={r: f"node{r}" for r in range(4)})
    before = {r: t.gpu["start_ns"].to_numpy().copy() for r, t in ts.ranks.items()}
    rep = analyze_cross_rank(ts)
    for r, off in offsets.items():
        assert abs(rep.clock.offsets_ns[r] - off) <= 1_000
    assert rep.clock.residual_skew_max_ns <= 1_000
    for r, t in ts.ranks.items():  # the input is never modified; the aligned copy is shifted
        assert np.array_equal(t.gpu["start_ns"].to_numpy(), before[r])
        shifted = rep.aligned.ranks[r].gpu["start_ns"].to_numpy()
        assert np.array_equal(shifted, before[r] + rep.clock.offsets_ns[r])
    # aligned starts in the table: true arrival order (rank 2 last by 300 µs) is back
    row = rep.collectives_by_rank().iloc[0]
    assert row["start_ns_r2"] - row["start_ns_r0"] == 300 * US


def test_epoch_nanoseconds_stay_exact():
    # Kineto times are epoch ns (~1.7e18): a float64 would round them to ~256 ns
    base = 1_682_725_898_082_228_123
    ts, _ = collective_run(2, arrivals={0: [0] * 6, 1: [7 * US] * 6}, offsets={1: 1_234_567},
                           hostnames={0: "a", 1: "b"}, base=base)
    rep = analyze_cross_rank(ts)
    assert rep.clock.offsets_ns[1] == 1_234_567 and rep.clock.residual_skew_ns == 0
    row = rep.collectives_by_rank().iloc[0]
    assert row["start_ns_r0"] == base + 10 * US and row["start_ns_r1"] == base + 17 * US
    assert row["arrival_ns"] == base + 17 * US and row["wait_ns_r0"] == 7 * US


def test_unknown_host_with_large_offset_is_estimated():
    ts, _ = collective_run(2, arrivals={0: [0] * 6, 1: [0] * 6}, offsets={1: -5_000 * US})
    c = analyze_cross_rank(ts).clock
    assert c.method == "matched-collective-ends" and abs(c.offsets_ns[1] + 5_000 * US) <= 1_000


def test_unknown_host_with_coinciding_ends_is_a_verified_shared_clock():
    ts, _ = collective_run(2, arrivals={0: [0, 30 * US] * 3, 1: [30 * US, 0] * 3})
    c = analyze_cross_rank(ts).clock
    assert c.shared_clock and c.method == "verified-by-collective-ends"
    assert c.offsets_ns == {0: 0, 1: 0} and not c.applied and c.unaligned_skew_ns == 0


def test_same_host_keeps_offset_zero():
    ts, _ = collective_run(2, arrivals={0: [0] * 6, 1: [0] * 6}, hostnames={0: "h", 1: "h"})
    c = analyze_cross_rank(ts).clock
    assert c.shared_clock and c.method == "same-host" and c.offsets_ns == {0: 0, 1: 0}


def test_separate_nsys_sessions_on_one_host_use_their_start_times():
    # nsys counts from each session's start: one hostname does not make one time base. The
    # sessions' UTC starts (one host clock) give the offset; here they say 3 µs more than the
    # collective ends do, and the start times win.
    ts, _ = collective_run(2, arrivals={0: [0] * 6, 1: [0] * 6}, offsets={1: 2_500 * US},
                           hostnames={0: "h", 1: "h"})
    ts.fmt = "nsys"
    for r, t in ts.ranks.items():
        t.meta["session_start_utc_ns"] = 1_700_000_000_000_000_000 + r * 2_503 * US
    c = analyze_cross_rank(ts).clock
    assert not c.shared_clock and c.method == "session-start" and c.trusted
    assert c.offsets_ns[1] == 2_503 * US and c.estimated_offsets_ns[1] == 2_500 * US
    assert c.residual_skew_ns == 3 * US
    # without the start times: estimated from the collective ends, never assumed shared
    for t in ts:
        t.meta.pop("session_start_utc_ns")
    c = analyze_cross_rank(ts).clock
    assert not c.shared_clock and "separate profiling sessions" in c.reason
    assert c.offsets_ns[1] == 2_500 * US


def test_no_align_applies_nothing_but_reports_the_estimate():
    ts, _ = collective_run(2, arrivals={0: [0] * 6, 1: [0] * 6}, offsets={1: 900 * US},
                           hostnames={0: "a", 1: "b"})
    rep = analyze_cross_rank(ts, align=False)
    assert rep.clock.method == "disabled" and rep.clock.offsets_ns == {0: 0, 1: 0}
    assert abs(rep.clock.estimated_offsets_ns[1] - 900 * US) <= 1_000
    assert rep.clock.residual_skew_ns == 900 * US
    assert any("--no-align" in n for n in rep.notes)
    assert rep.aligned.clock_offsets_ns == {0: 0, 1: 0}


def test_offsets_not_applied_when_no_offset_makes_ends_coincide():
    # rank 1's collective ends wander by milliseconds: no single offset explains them
    specs = {}
    for r in range(2):
        ks = [K(i * 10_000 * US, i * 10_000 * US + 100 * US + (r * i * i * 700 * US), 1, ALLREDUCE)
              for i in range(5)]
        specs[r] = RankSpec(ks, hostname=f"n{r}")
    rep = analyze_cross_rank(trace_set(specs))
    assert rep.clock.method == "none" and rep.clock.offsets_ns == {0: 0, 1: 0}
    assert any("not applied" in n for n in rep.notes)


# --------------------------------------------------------------------------- matching

def test_sequence_numbers_match_and_missing_ones_are_reported():
    # rank 1 lacks seq 2; by order its seq 3 would be paired with rank 0's seq 2
    specs = {r: RankSpec([K(i * 1_000 * US + r * 3 * US, i * 1_000 * US + 100 * US, 1, ALLREDUCE, pg="0", seq=i)
                          for i in range(5) if not (r == 1 and i == 2)]) for r in range(2)}
    rep = analyze_cross_rank(trace_set(specs))
    assert rep.n_matched == 4
    assert rep.collectives["seq"].tolist() == [0, 1, 3, 4]
    by_rank = rep.collectives_by_rank()
    assert (by_rank["end_ns_r0"] == by_rank["end_ns_r1"]).all()
    assert [(u["rank"], u["count"]) for u in rep.unmatched] == [(0, 1)]
    assert (rep.collectives["late_rank"] == 1).all()  # rank 1 starts each 3 µs later


def test_different_collective_names_are_inconsistent_not_matched():
    names = {0: [ALLREDUCE, ALLREDUCE, ALLREDUCE], 1: [ALLREDUCE, ALLGATHER, ALLREDUCE]}
    specs = {r: RankSpec([K(i * 1_000 * US, i * 1_000 * US + 100 * US, 1, n) for i, n in enumerate(names[r])])
             for r in range(2)}
    rep = analyze_cross_rank(trace_set(specs))
    assert rep.n_matched == 2
    assert len(rep.inconsistent) == 1
    bad = rep.inconsistent[0]
    assert bad["index"] == 1 and bad["names"] == {"0": "AllReduce", "1": "AllGather"}


def test_different_counts_without_sequence_numbers_are_not_guessed():
    # rank 1 ran one more all-reduce, and its ends never coincide with rank 0's at any shift
    specs = {0: RankSpec([K(i * 1_000 * US, i * 1_000 * US + 100 * US, 1, ALLREDUCE) for i in range(4)]),
             1: RankSpec([K(i * 700 * US, i * 700 * US + 100 * US, 1, ALLREDUCE) for i in range(5)])}
    rep = analyze_cross_rank(trace_set(specs))
    assert rep.n_matched == 0
    assert rep.inconsistent[0]["counts"] == {"0": 4, "1": 5}
    assert rep.clock.method == "none" and not cross_rank_findings(rep)


def test_profiler_edges_are_trimmed_where_ends_coincide():
    # rank 1 has 7 all-reduces, rank 0 the last 6 of them; one host: the ends place the edge
    specs = {r: RankSpec([K(2_000 * US + i * 1_000 * US + r * 4 * US, 2_000 * US + i * 1_000 * US + 100 * US, 1,
                            ALLREDUCE) for i in range(-r, 6)], hostname="h") for r in range(2)}
    rep = analyze_cross_rank(trace_set(specs, world_size=2))
    assert rep.n_matched == 6 and not rep.inconsistent
    by_rank = rep.collectives_by_rank()
    assert (by_rank["end_ns_r0"] == by_rank["end_ns_r1"]).all()
    assert [(u["rank"], u["count"]) for u in rep.unmatched] == [(1, 1)]
    assert "trace edge" in rep.unmatched[0]["reason"]
    assert (rep.collectives["late_rank"] == 1).all()


def test_unknown_host_edges_trimmed_where_ends_coincide_without_offset():
    # no hostnames, nothing else to match: ends coinciding at offset 0 verify the clock and the edge
    specs = {r: RankSpec([K(2_000 * US + i * 1_000 * US, 2_000 * US + i * 1_000 * US + 100 * US, 1, ALLREDUCE)
                          for i in range(-r, 6)]) for r in range(2)}
    rep = analyze_cross_rank(trace_set(specs, world_size=2))
    assert rep.n_matched == 6 and rep.clock.method == "verified-by-collective-ends"


def test_edges_are_not_trimmed_without_a_trusted_clock_or_when_ambiguous():
    # two hosts, nothing else matched: no clock to place the edge with, so no trimming
    specs = {r: RankSpec([K(2_000 * US + i * 1_000 * US, 2_000 * US + i * 1_000 * US + 100 * US, 1, ALLREDUCE)
                          for i in range(-r, 6)], hostname=f"node{r}") for r in range(2)}
    rep = analyze_cross_rank(trace_set(specs, world_size=2))
    assert rep.n_matched == 0 and rep.inconsistent[0]["counts"] == {"0": 6, "1": 7}
    # one host, but collectives 10 µs apart (< tolerance): two shifts fit, so none is chosen
    dense = {r: RankSpec([K(2_000 * US + i * 10 * US, 2_000 * US + i * 10 * US + 5 * US, 1, ALLREDUCE)
                          for i in range(-r, 6)], hostname="h") for r in range(2)}
    rep = analyze_cross_rank(trace_set(dense, world_size=2))
    assert rep.n_matched == 0 and rep.inconsistent


def test_non_nccl_communication_is_matched_per_stream():
    # barriers on two streams; rank 1 runs the stream-9 barrier first: order per stream still pairs them
    specs = {
        0: RankSpec([K(0, 50 * US, 7, BARRIER), K(100 * US, 150 * US, 9, BARRIER)]),
        1: RankSpec([K(120 * US, 150 * US, 7, BARRIER), K(10 * US, 150 * US, 9, BARRIER)]),
    }
    rep = analyze_cross_rank(trace_set(specs, world_size=2))
    cols = rep.collectives.set_index("group")
    assert set(cols.index) == {"c10d::symmetric_memory::barrier_kernel @ stream 7",
                               "c10d::symmetric_memory::barrier_kernel @ stream 9"}
    assert cols.loc["c10d::symmetric_memory::barrier_kernel @ stream 7", "late_rank"] == 1


# --------------------------------------------------------------------------- peer wait and late peer

def test_late_rank_named_and_wait_split_on_four_ranks():
    arrivals = {0: [0] * 6, 1: [5 * US] * 6, 2: [300 * US] * 6, 3: [10 * US] * 6}
    ts, truth = collective_run(4, arrivals=arrivals, offsets={1: 2_000 * US, 3: -777 * US},
                               hostnames={r: f"n{r}" for r in range(4)}, compute=[(0, 350 * US)])
    rep = analyze_cross_rank(ts)
    assert rep.collectives["late_rank"].tolist() == truth["late"]
    for r in range(4):
        pw = rep.peer_wait[r]
        assert pw["wait_ns"] == truth["wait"][r]
        assert pw["transfer_ns"] == truth["n"] * truth["transfer"]
        assert pw["kernel_ns"] == pw["wait_ns"] + pw["transfer_ns"]
    # rank 0: kernel [0,400) µs, compute [0,350): plain overlap 350/400; transfer [300,400): 50/100
    assert rep.peer_wait[0]["overlap_ratio"] == pytest.approx(350 / 400)
    assert rep.peer_wait[0]["effective_overlap_ratio"] == pytest.approx(0.5)
    assert rep.peer_wait[2]["n_late"] == 6 and rep.late_ranks[0]["rank"] == 2
    late = _ids(cross_rank_findings(rep), "late-peer")
    assert len(late) == 1 and late[0].ranks[0] == 2 and late[0].severity == "critical"
    assert set(late[0].ranks[1:]) == {0, 1, 3}
    assert late[0].evidence["wait_caused_ns"] == sum(truth["wait"].values())
    # the GEMM [0, 350) hides every wait, but the late arrival pushed rank 0's transfer [300, 400)
    # past it: 50 µs exposed per collective, so the straggler did cost overlap
    assert late[0].evidence["exposed_ns"] >= rep.peer_wait[0]["exposed_for_rank_ns"]["2"] == 6 * 50 * US


def test_ranks_arriving_within_jitter_have_no_late_rank():
    arrivals = {r: [(r * 300) % 1_000] * 6 for r in range(4)}  # < 1 µs apart
    ts, _ = collective_run(4, arrivals=arrivals)
    rep = analyze_cross_rank(ts)
    assert (rep.collectives["late_rank"] == -1).all()
    assert not rep.late_ranks and not _ids(cross_rank_findings(rep), "late-peer")


def test_ranks_taking_turns_are_no_straggler():
    ts, _ = collective_run(2, arrivals={0: [200 * US, 0] * 3, 1: [0, 200 * US] * 3})
    rep = analyze_cross_rank(ts)
    assert rep.collectives["late_rank"].tolist() == [0, 1] * 3
    assert rep.peer_wait[0]["wait_ns"] == rep.peer_wait[1]["wait_ns"] == 3 * 200 * US
    assert not _ids(cross_rank_findings(rep), "late-peer")


def test_small_waits_raise_no_late_peer_finding():
    # always rank 1, but 5 µs late on 100 µs transfers: 30 µs total < late_peer_min_wait_ns
    ts, _ = collective_run(2, arrivals={0: [0] * 6, 1: [5 * US] * 6})
    rep = analyze_cross_rank(ts)
    assert (rep.collectives["late_rank"] == 1).all()
    assert not _ids(cross_rank_findings(rep), "late-peer")
    loose = analyze_cross_rank(ts, params=CrossRankParams(late_peer_min_wait_ns=0, late_peer_min_wait_fraction=0.01))
    assert _ids(cross_rank_findings(loose), "late-peer")[0].ranks == [1, 0]


# --------------------------------------------------------------------------- order mismatch

def _only_mismatch(rep):
    assert len(rep.mismatches) == 1, rep.mismatches
    return rep.mismatches.iloc[0]


def test_order_swap_found_at_the_right_kernels():
    rep = analyze_cross_rank(two_stream_run(swap_ranks=[1], swap_steps=[1]))
    m = _only_mismatch(rep)
    assert (m["rank_a"], m["rank_b"], m["step"]) == (0, 1, 2)
    assert {m["kernel_x"], m["kernel_y"]} == {GEMM, GEMM_B}
    first_a = m["kernel_x"] if m["first_on_a"] == "x" else m["kernel_y"]
    assert first_a == GEMM_B  # rank 0 ran the backend producer first, rank 1 main's
    assert normalized_name(m["coll_name"]) == "c10d::symmetric_memory::barrier_kernel"
    assert m["dependency_start_ns"] == TWO_STREAM_BASE + 1_000 * US + 100 * US  # rank 0's backend barrier, step 2
    assert m["wait_caused_ns"] == 100 * US and m["waiting_rank"] == 0
    f = _ids(cross_rank_findings(rep), "cross-rank-order-mismatch")
    assert len(f) == 1 and f[0].ranks == [0, 1] and f[0].evidence["wait_caused_ns"] == 100 * US
    check = rep.mismatch_summary["order_checks"][0]  # the evidence: step 2's first stream differs
    assert check["steps"] == 3 and check["steps_same_first_stream"] == 2
    assert check["first_lead_ns_a"][1] < 0 < check["first_lead_ns_b"][1]


def test_same_order_on_all_ranks_is_no_mismatch():
    rep = analyze_cross_rank(two_stream_run(swap_ranks=[]))
    assert rep.mismatches.empty and rep.mismatch_summary["role_pairs"] == 1
    assert not _ids(cross_rank_findings(rep), "cross-rank-order-mismatch")


def test_sleep_kernel_variant_is_no_mismatch():
    rep = analyze_cross_rank(two_stream_run(sleep=True))
    assert rep.mismatches.empty and not cross_rank_findings(rep)
    check = rep.mismatch_summary["order_checks"][0]  # zero, with the evidence: same first stream every step
    assert check["swapped"] == 0 and check["steps_same_first_stream"] == check["steps"] == 3


def test_order_kept_with_launch_jitter_is_no_mismatch():
    rep = analyze_cross_rank(two_stream_run(swap_ranks=[], jitter=50 * US))
    assert rep.mismatches.empty


def test_swap_without_a_following_dependency_is_harmless():
    rep = analyze_cross_rank(two_stream_run(with_barrier=False))
    assert rep.mismatches.empty
    assert rep.mismatch_summary["n_swaps_without_dependency"] >= 1


def test_order_flip_within_gap_is_noise_and_beyond_gap_is_reported():
    gap = CrossRankParams().min_order_gap_ns
    quiet = analyze_cross_rank(two_stream_run(near_tie=gap // 2))
    assert quiet.mismatches.empty
    loud = analyze_cross_rank(two_stream_run(near_tie=3 * gap))
    assert len(loud.mismatches) == 3  # one per step
    # the barriers started together, so nothing waited: listed, but no finding
    assert (loud.mismatches["wait_caused_ns"] == 0).all()
    assert not _ids(cross_rank_findings(loud), "cross-rank-order-mismatch")


def test_streams_matched_by_role_not_by_id():
    # rank 1 recorded main on stream 9 and the backend on 7: roles follow the kernels
    rep = analyze_cross_rank(two_stream_run(swap_ranks=[1], swap_steps=[0], stream_ids={1: (9, 7)}))
    roles1 = {d["stream"]: d["role"] for d in rep.stream_roles[1]}
    assert roles1 == {9: "stream 7", 7: "stream 9"}
    m = _only_mismatch(rep)
    assert {m["kernel_x"], m["kernel_y"]} == {GEMM, GEMM_B} and m["step"] == 1
    same = analyze_cross_rank(two_stream_run(swap_ranks=[], stream_ids={1: (9, 7)}))
    assert same.mismatches.empty


def _swap_then_allreduce(c_start_r0: int, c_start_r1: int):
    """x = GEMM on stream 7 then an all-reduce C on stream 7; y = GEMM_B on stream 9.
    Rank 0 starts x first, rank 1 starts y first (a swap). C's start per rank is given."""
    end = max(c_start_r0, c_start_r1) + 100 * US
    specs = {
        0: RankSpec([K(0, 100 * US, 7, GEMM), K(10 * US, 300 * US, 9, GEMM_B), K(c_start_r0, end, 7, ALLREDUCE)],
                    hostname="h"),
        1: RankSpec([K(10 * US, 100 * US, 7, GEMM), K(0, 300 * US, 9, GEMM_B), K(c_start_r1, end, 7, ALLREDUCE)],
                    hostname="h"),
    }
    return analyze_cross_rank(trace_set(specs, world_size=2))


def test_swap_explains_the_wait_only_when_the_delaying_rank_is_late():
    # C is on x's stream, so the rank that ran y first (rank 1) is the one the swap delays
    explained = _swap_then_allreduce(c_start_r0=120 * US, c_start_r1=800 * US)
    m = _only_mismatch(explained)
    assert m["delaying_rank"] == 1 and m["late_rank"] == 1 and m["explains_wait"]
    assert m["wait_caused_ns"] == 680 * US and m["waiting_rank"] == 0
    assert _ids(cross_rank_findings(explained), "cross-rank-order-mismatch")
    # same swap, but rank 0 reached C late: the swap does not explain that wait
    unexplained = _swap_then_allreduce(c_start_r0=800 * US, c_start_r1=120 * US)
    m = _only_mismatch(unexplained)
    assert m["delaying_rank"] == 1 and m["late_rank"] == 0 and not m["explains_wait"]
    assert not _ids(cross_rank_findings(unexplained), "cross-rank-order-mismatch")
    assert unexplained.mismatch_summary["wait_caused_ns"] == 0


def test_profiler_opening_earlier_on_one_rank_creates_no_swap():
    # stream 7 computes only (no collective to count from); stream 9: GEMM_B then an all-reduce.
    # Same order on both ranks, but rank 1's profile also caught a GEMM launched before step 1.
    period, base = 1_000 * US, 2_000 * US
    specs = {}
    for r in range(2):
        ks = []
        for s_ in range(3):
            t0 = base + s_ * period
            ks += [K(t0, t0 + 100 * US, 7, GEMM), K(t0 + 150 * US, t0 + 250 * US, 9, GEMM_B),
                   K(t0 + 300 * US, t0 + 400 * US, 9, ALLREDUCE)]
        if r == 1:
            ks.append(K(base - 600 * US, base - 500 * US, 7, GEMM))
        specs[r] = RankSpec(ks, hostname="h",
                            steps=[(s_ + 1, base + s_ * period - 10 * US, base + (s_ + 1) * period - 10 * US)
                                   for s_ in range(3)])
    rep = analyze_cross_rank(trace_set(specs, world_size=2))
    assert rep.n_matched == 3
    assert rep.mismatches.empty and rep.mismatch_summary["n_swaps_without_dependency"] == 0
    check = rep.mismatch_summary["order_checks"][0]
    assert check["steps"] == 3 and check["steps_same_first_stream"] == 3


def test_four_ranks_only_the_swapped_rank_is_reported():
    rep = analyze_cross_rank(two_stream_run(n_ranks=4, swap_ranks=[3], swap_steps=[0, 2]))
    assert sorted(set(rep.mismatches["rank_b"])) == [3]
    assert sorted(rep.mismatches["step"]) == [1, 3]


# --------------------------------------------------------------------------- output

def test_report_is_json_with_every_section():
    rep = analyze_cross_rank(two_stream_run())
    d = json.loads(json.dumps(rep.to_dict()))
    for key in ("clock", "collectives", "unmatched", "inconsistent", "peer_wait", "late_ranks", "mismatches",
                "stream_roles", "notes", "params"):
        assert key in d
    assert d["clock"]["offsets_ns"] == {"0": 0, "1": 0}
    assert d["n_mismatches"] == 1 and d["mismatches"][0]["rank_b"] == 1
    assert d["collectives"][0]["total_wait_ns"] is not None
    # per-rank columns are made on request (their long form: members, `analyze --tables`), not held or listed
    assert "wait_ns_r0" in rep.collectives_by_rank() and not any(k.endswith("_r0") for k in d["collectives"][0])
    assert "wait_ns_r0" not in rep.collectives
    for f in cross_rank_findings(rep):
        json.dumps(f.to_dict())


def test_single_rank_is_a_note_not_an_error():
    ts, _ = collective_run(1, arrivals={0: [0] * 6})
    rep = analyze_cross_rank(ts)
    assert rep.n_matched == 0 and rep.notes and cross_rank_findings(rep) == []
    json.dumps(rep.to_dict())


def test_rendering_tables_and_markdown():
    from rich.console import Console

    from overlapscope.render_crossrank import cross_rank_markdown, cross_rank_table

    ts, _ = collective_run(2, arrivals={0: [0] * 6, 1: [300 * US] * 6}, offsets={1: 42 * US},
                           hostnames={0: "a", 1: "b"})
    rep = analyze_cross_rank(ts).to_dict()  # the renderers draw the JSON document
    tables = cross_rank_table(rep)
    console = Console(record=True, width=160)
    for t in tables:
        console.print(t)
    text = console.export_text()
    assert "42.0 µs" in text and "rank 1" in text
    md = cross_rank_markdown(rep)
    assert "## Cross-rank" in md and "| rank |" in md and "42.0 µs" in md
    swap = cross_rank_markdown(analyze_cross_rank(two_stream_run()).to_dict())
    assert "Scheduling-order mismatches" in swap and "barrier\\_kernel" in swap  # names as Markdown text


# --------------------------------------------------------------------------- real traces (tests/data/public)

def test_sampled_ranks_of_a_large_job_do_not_guess(hta_dir):
    ts = load_traces([hta_dir / "trace_filter_sampled_rank-0.json.gz", hta_dir / "trace_filter_sampled_rank-1.json.gz"])
    rep = analyze_cross_rank(ts)
    # 2 of 128 ranks, send/recv only: the peers are not in the trace, so no wait and no late peer
    assert rep.n_matched == 10 and not rep.collectives["peers_known"].any()
    assert all(pw["wait_ns"] == 0 for pw in rep.peer_wait.values())
    assert rep.clock.offsets_ns == {0: 0, 1: 0}
    assert not cross_rank_findings(rep)


def test_nsys_two_processes_share_a_clock_and_split_sendrecv_time():
    path = NSYS_TRACES / "mfu_2gpu_before.sqlite"
    if not path.exists():
        pytest.fail(f"bundled trace missing: {path}")
    ts = load_traces([path])
    rep = analyze_cross_rank(ts)
    assert rep.clock.shared_clock and rep.clock.method == "same-file" and rep.clock.offsets_ns == {0: 0, 1: 0}
    # independent check: the k-th SendRecv of each rank, straight from the gpu tables
    starts, ends = {}, {}
    for r, t in ts.ranks.items():
        c = t.gpu[t.gpu["category"] == "comm"].sort_values("start_ns")
        starts[r], ends[r] = c["start_ns"].to_numpy(), c["end_ns"].to_numpy()
    assert rep.n_matched == len(starts[0]) == len(starts[1])
    arrival = np.maximum(starts[0], starts[1])
    for r in (0, 1):
        wait = np.clip(arrival - starts[r], 0, ends[r] - starts[r]).sum()
        assert rep.peer_wait[r]["wait_ns"] == wait
        assert rep.peer_wait[r]["kernel_ns"] == (ends[r] - starts[r]).sum()
    # rank 1 starts later at most of them (the pipeline's receiving stage), and is named
    assert (starts[1] > starts[0]).sum() > len(starts[0]) / 2
    late = _ids(cross_rank_findings(rep), "late-peer")
    assert [f.ranks[0] for f in late] == [1]


# --------------------------------------------------------------------------- sample traces (runners, 2xH200)

def _sample(*parts: str):
    d = SAMPLES.joinpath(*parts)
    files = sorted(d.glob("rank?.json.gz")) or sorted(d.glob("rank*.sqlite"))
    if len(files) < 2:
        pytest.fail(f"sample traces missing in {d}: they are committed with the repository")
    return load_traces(files)


def test_sample_ag_gemm_baseline_long_first_allgather_is_wait_not_comm():
    ts = _sample("ag-gemm", "baseline")
    rep = analyze_cross_rank(ts)
    assert rep.clock.shared_clock  # one host; the ends coincide without offset
    # independently, from the gpu tables: each rank's all-gather kernels in order
    ag = {r: t.gpu[t.gpu["coll_name"] == "AllGather"].sort_values("start_ns") for r, t in ts.ranks.items()}
    dur = {r: (g["end_ns"] - g["start_ns"]).to_numpy() for r, g in ag.items()}
    long_rank = max(dur, key=lambda r: dur[r][0])
    other = 1 - long_rank
    assert dur[long_rank][0] > dur[other][0]  # the first all-gather runs longer on one rank ...
    first = rep.collectives_by_rank().iloc[0]
    assert first["coll_name"] == "AllGather" and first["late_rank"] == other  # ... because the other came late
    skew = int(ag[other]["start_ns"].iloc[0] - ag[long_rank]["start_ns"].iloc[0])
    assert first[f"wait_ns_r{long_rank}"] == skew > 0
    # what remains of the long kernel is a transfer as long as the other rank's (within the end spread)
    transfer = first[f"transfer_ns_r{long_rank}"]
    assert transfer + skew == dur[long_rank][0]
    assert abs(transfer - first[f"transfer_ns_r{other}"]) <= first["end_spread_ns"]


def test_sample_symm_mem_two_stream_without_sleep_kernel_has_mismatches():
    rep = analyze_cross_rank(_sample("symm-mem", "two-stream"))
    check = rep.mismatch_summary["order_checks"][0]
    m = rep.mismatches
    if m.empty:  # the GPU happened to schedule both ranks alike: then the evidence must say so
        assert check["swapped"] == 0 and check["steps_same_first_stream"] == check["steps"] > 0
        return
    explained = m[m["explains_wait"].astype(bool)]
    assert len(explained) >= 1
    # the swapped kernels are the two streams' producer GEMMs, and a barrier waited behind them
    top = explained.sort_values("wait_caused_ns").iloc[-1]
    assert top["stream_x"] != top["stream_y"] and top["kernel_x"].startswith("nvjet") and \
        top["kernel_y"].startswith("nvjet")
    assert "barrier_kernel" in top["coll_name"] and top["wait_caused_ns"] > 0
    assert check["steps_same_first_stream"] < check["steps"]
    assert _ids(cross_rank_findings(rep), "cross-rank-order-mismatch")


def test_sample_symm_mem_two_stream_with_sleep_kernel_has_none():
    rep = analyze_cross_rank(_sample("symm-mem", "two-stream-sleep"))
    assert rep.mismatches.empty and not _ids(cross_rank_findings(rep), "cross-rank-order-mismatch")
    check = rep.mismatch_summary["order_checks"][0]  # compared, and every step started the same way
    assert check["kernels_x"] > 0 and check["swapped"] == 0
    assert check["steps_same_first_stream"] == check["steps"] == 3
    assert rep.n_matched > 0 and not rep.inconsistent


def test_sample_nsys_sessions_aligned_by_start_time_agree_with_collective_ends():
    ts = _sample("ag-gemm-nsys", "sync-before-loop")
    c = analyze_cross_rank(ts).clock
    starts = {t.rank: t.meta["session_start_utc_ns"] for t in ts}
    assert c.method == "session-start" and c.offsets_ns[1] == starts[1] - starts[0]
    # the collective ends, on their own, place rank 1 within the shared-clock tolerance of that
    assert abs(c.estimated_offsets_ns[1] - c.offsets_ns[1]) <= CrossRankParams().shared_clock_tolerance_ns
    assert c.residual_skew_ns <= CrossRankParams().shared_clock_tolerance_ns


def test_late_peer_whose_wait_ran_beside_compute_is_info_only():
    # rank 1 always 200 µs late; rank 0's wait lies under its own GEMM [0, 450 µs): it cost no overlap
    ts, truth = collective_run(2, arrivals={0: [0] * 6, 1: [200 * US] * 6}, compute=[(0, 450 * US)])
    rep = analyze_cross_rank(ts)
    assert rep.peer_wait[0]["wait_for_rank_ns"] == {"1": truth["wait"][0]} and truth["wait"][0] == 6 * 200 * US
    assert rep.peer_wait[0]["exposed_for_rank_ns"] == {"1": 0}
    (late,) = _ids(cross_rank_findings(rep), "late-peer")
    assert late.severity == "info" and "costs no overlap" in late.title
    assert late.evidence["exposed_ns"] == 0


def test_late_peer_whose_wait_nothing_hid_stays_critical():
    # the same straggler, but rank 0's GEMM runs after the collective: its 200 µs wait and 100 µs
    # transfer are exposed, every time
    ts, truth = collective_run(2, arrivals={0: [0] * 6, 1: [200 * US] * 6}, compute=[(500 * US, 900 * US)])
    rep = analyze_cross_rank(ts)
    assert rep.peer_wait[0]["exposed_for_rank_ns"] == {"1": truth["wait"][0] + 6 * 100 * US}
    (late,) = _ids(cross_rank_findings(rep), "late-peer")
    assert late.severity == "critical" and "costs no overlap" not in late.title
    assert late.evidence["exposed_ns"] == 6 * 300 * US
