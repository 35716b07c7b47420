"""The straggler view on hand-made runs whose lateness, last arrivals and windows are known."""

from __future__ import annotations

import numpy as np
import pytest

from analyzers.crossrank import analyze_cross_rank
from analyzers.crossrank.stragglers import lateness_matrix, robust_z, straggler_view

from .synth_multi import US, collective_run


def _view(ts):
    rep = analyze_cross_rank(ts)
    return rep, straggler_view(rep.aligned.ranks, rep.collectives, rep.members)


def test_one_late_rank_is_flagged_with_what_it_did_before():
    # 8 ranks, 6 collectives 1 ms apart; rank 5 starts each 300 µs after the period start, the others
    # r*100 ns after it (jitter). GEMM [0, 300) µs of each period on every rank.
    arrivals = {r: [(300 * US if r == 5 else r * 100)] * 6 for r in range(8)}
    ts, _ = collective_run(8, arrivals=arrivals, hostnames={r: f"node{r // 4}" for r in range(8)})
    _, view = _view(ts)
    by = {r["rank"]: r for r in view["ranks"]}
    assert view["n_collectives"] == 6
    assert by[5]["n_last"] == 6 and by[5]["last_share"] == 1.0
    assert by[5]["median_lateness_ns"] == by[5]["worst_lateness_ns"] == 300 * US  # rank 0 is first, at 0
    assert by[3]["median_lateness_ns"] == 300 and by[3]["n_last"] == 0
    assert view["outliers"] == [5]
    assert [r for r, d in by.items() if d["outlier"]] == [5]
    # Before collectives 1..5 rank 5's previous collective ended 900 µs earlier (period start - 1000
    # + 300 + 100); the GEMM [0, 300) of its period lies inside; the first collective has no window.
    assert by[5]["before_window_ns"] == 5 * 900 * US
    assert by[5]["before_compute_ns"] == 5 * 300 * US
    assert by[5]["before_idle_ns"] == 5 * 600 * US
    assert by[5]["before_mostly"] == "idle GPU"
    hosts = {h["host"]: h for h in view["hosts"]}
    assert hosts["node1"]["ranks"] == [4, 5, 6, 7] and hosts["node1"]["outliers"] == [5]
    assert hosts["node0"]["outliers"] == [] and hosts["node1"]["n_last"] == 6


def test_ranks_taking_turns_flag_no_outlier():
    # look-alike: each rank is the late one once, by the same 300 µs: no rank stands out
    arrivals = {r: [300 * US if i == r else 0 for i in range(8)] for r in range(8)}
    ts, _ = collective_run(8, arrivals=arrivals, n_colls=8)
    _, view = _view(ts)
    assert view["outliers"] == []
    assert all(r["n_last"] == 1 and r["worst_lateness_ns"] == 300 * US for r in view["ranks"])
    assert view["hosts"] == []  # the traces name no host


def test_equal_jitter_flags_no_outlier():
    # look-alike: every rank late by a few hundred ns at random, none a straggler
    rng = np.random.default_rng(3)
    arrivals = {r: rng.integers(0, 900, 6).tolist() for r in range(16)}
    ts, _ = collective_run(16, arrivals=arrivals)
    _, view = _view(ts)
    assert view["outliers"] == []


def test_robust_z_by_hand():
    assert robust_z(np.array([1.0, 2.0, 3.0, 4.0, 100.0])).tolist() == pytest.approx(
        [0.6745 * (x - 3) / 1 for x in (1, 2, 3, 4, 100)])
    # MAD 0: the mean absolute deviation (2) stands in
    assert robust_z(np.array([0.0, 0, 0, 0, 10]))[-1] == pytest.approx(10 / (1.2533 * 2))
    assert robust_z(np.array([5.0, 5.0])).tolist() == [0.0, 0.0]


def test_lateness_matrix_bins_collectives_by_their_worst():
    arrivals = {0: [0, 0, 0, 0], 1: [10 * US, 0, 0, 40 * US], 2: [0, 20 * US, 30 * US, 0]}
    ts, _ = collective_run(3, arrivals=arrivals, n_colls=4)
    rep, _ = _view(ts)
    mat, first_ids, ranks = lateness_matrix(rep.collectives, rep.members, [0, 1, 2], max_columns=2)
    assert ranks == [0, 1, 2] and mat.shape == (3, 2)
    assert first_ids.tolist() == sorted(rep.collectives["coll_id"].tolist())[::2]
    assert mat.tolist() == [[0, 0], [10 * US, 40 * US], [20 * US, 30 * US]]
