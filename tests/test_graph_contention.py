"""Contention in the replay: slowdowns estimated from a hand-made trace and the replays they change,
worked out by hand (analyzers/graph/contention.py, docs/whatif.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analyzers.graph.analysis import whatif
from analyzers.graph.contention import estimate
from analyzers.graph.fixes import Fix, apply_fixes, parse_fix
from analyzers.graph.replay import replay
from tests.test_graph import US, _graph, _run, _us

C, X = 0, 1  # categories: compute, communication


def _calibrated(rank: int = 0, *, with_pair: bool = True):
    """Compute kernel "gemm" on stream 0 and communication kernel "nccl" on stream 1, each launched when it
    started (so the replay reproduces the timeline), µs:

    - alone: gemm 0-100, 200-300 (and 800-900); nccl 150-160, 170-180 (and 900-910);
    - side by side: gemm 400-520 with nccl 400-420, gemm 600-720 with nccl 600-620.

    nccl: alone 10, 20 when wholly beside compute (f = 1): s = 20/10 - 1 = 1.
    gemm: alone 100, 120 with 20 of its 120 beside nccl (f = 1/6): s = (120/100 - 1) / (1/6) = 1.2.
    with_pair adds gemm 800-900 and nccl 900-910, which waited for that gemm through an event (launched at 800).
    """
    start = [0, 200, 150, 170, 400, 400, 600, 600]
    end = [100, 300, 160, 180, 520, 420, 720, 620]
    stream = [0, 0, 1, 1, 0, 1, 0, 1]
    cat = [C, C, X, X, C, X, C, X]
    names = ["gemm", "gemm", "nccl", "nccl", "gemm", "nccl", "gemm", "nccl"]
    off = list(start)
    dep = [-1] * 8
    if with_pair:
        start, end, stream, cat = start + [800, 900], end + [900, 910], stream + [0, 1], cat + [C, X]
        names, off, dep = names + ["gemm", "nccl"], off + [800, 800], dep + [-1, 8]
    order = np.lexsort((start, stream))
    prev = [-1] * len(start)
    for a, b in zip(order[:-1].tolist(), order[1:].tolist(), strict=True):
        if stream[a] == stream[b]:
            prev[b] = a
    return _graph(rank, start, end, stream=stream, prev=prev, off=off, dep=dep, cat=cat, names=names)


def test_slowdowns_are_estimated_from_instances_alone_and_side_by_side():
    run = _run([_calibrated()])
    m = estimate(run.sg)
    cat = run.sg.cat
    assert np.allclose(m.slowdown[cat == C], 1.2) and np.allclose(m.slowdown[cat == X], 1.0)
    assert m.measured_f[4] == pytest.approx(1 / 6) and m.measured_f[5] == 1.0 and m.measured_f[0] == 0.0
    # the unmodified graph replays to its measured durations: every activity's overlap is as measured
    assert _us(run.base.start) == _us(run.sg.start) and _us(run.base.end) == _us(run.sg.end)
    assert not m.notes


def test_a_fix_that_lets_comm_run_beside_compute_slows_both():
    # serialized-streams drops nccl 900-910's wait for gemm 800-900: it starts at its launch, 800, beside the
    # gemm. Fixed point: nccl wholly beside the gemm (f = 1) takes 10 x (1 + 1) = 20; the gemm, 20 of its d
    # beside nccl, d = 100 x (1 + 1.2 x 20 / d), i.e. d^2 - 100 d - 2400 = 0, d = 120. Without contention the
    # step would end at 900; with it, at 920 (the replay stops once the step moves by under 0.2 %: 2 µs).
    run = _run([_calibrated()])
    res = whatif(run, [Fix("serialized-streams")])
    assert res["replayed_step_ns"] == 910 * US
    assert res["predicted_step_ns"] == pytest.approx(920 * US, abs=2 * US)
    inp, rp = run.run([Fix("serialized-streams")])
    assert _us(rp.start)[8:] == [800, 800]
    assert rp.end[9] == 820 * US and rp.end[8] == pytest.approx(920 * US, abs=2 * US)
    # the plain replay of the same inputs keeps the measured durations: 900
    plain = replay(run.sg, apply_fixes(run.sg, [Fix("serialized-streams")]))
    assert plain.end[8] == 900 * US and plain.end[9] == 810 * US


def test_comm_at_its_alone_speed_under_the_comm_contention_fix():
    # comm-contention: each nccl beside compute takes the median of its alone instances (10) and is not slowed;
    # a gemm beside a 10 µs nccl then takes d = 100 x (1 + 1.2 x 10 / d): d^2 - 100 d - 1200 = 0,
    # d = 50 + sqrt(3700) = 110.83 µs (from 120 measured)
    run = _run([_calibrated(with_pair=False)])
    inp, rp = run.run([Fix("comm-contention")])
    assert _us(rp.end[[5, 7]]) == [410, 610]
    assert rp.end[4] - rp.start[4] == pytest.approx((50 + 3700 ** 0.5) * US, abs=1 * US)


def test_a_kernel_name_without_its_own_instances_borrows_from_the_other_ranks():
    # rank 1 runs the same kernels, all side by side: its slowdowns come from rank 0's instances of the
    # same names (kernel-name level); rank 0 has its own
    g1 = _graph(1, [400, 400], [520, 420], stream=[0, 1], off=[400, 400], cat=[C, X], names=["gemm", "nccl"])
    run = _run([_calibrated(with_pair=False), g1])
    m = estimate(run.sg)
    assert np.allclose(m.slowdown[-2:], [1.2, 1.0])
    assert m.sources == {"communication: kernel": 4, "communication: kernel name": 1, "compute: kernel": 4,
                         "compute: kernel name": 1}


def test_nothing_ever_side_by_side_keeps_durations_and_says_so():
    # gemm then nccl, each alone: no slowdown can be estimated; the replay is the plain one and a note says so
    g = _graph(0, [0, 100, 200, 300], [100, 110, 300, 310], stream=[0, 1, 0, 1], prev=[-1, -1, 0, 1],
               off=[0, 100, 200, 300], cat=[C, X, C, X], names=["gemm", "nccl", "gemm", "nccl"])
    run = _run([g])
    m = estimate(run.sg)
    assert not m.active and len(m.notes) == 2
    assert any("communication durations are kept" in n for n in whatif(run, [])["notes"])


@pytest.mark.parametrize("same_step", [True, False])
def test_serialized_streams_keeps_a_wait_on_the_previous_step(same_step):
    # nccl (launched at 0) waited for a gemm 0-100 of another stream: inside one step the fix removes the
    # wait (the nccl runs 0-10, the step is the gemm's 100); a wait on the previous step's gemm is a real
    # dependency of the next iteration and stays (110)
    g = _graph(0, [0, 100], [100, 110], stream=[0, 1], off=[0, 0], dep=[-1, 0], cat=[C, X],
               step=[1, 1 if same_step else 2])
    run = _run([g])
    inp, rp = run.run([Fix("serialized-streams")])
    assert _us(rp.end) == ([100, 10] if same_step else [100, 110])


@pytest.mark.parametrize("with_steps", [True, False])
def test_one_name_running_two_shapes_is_fitted_per_call_site(with_steps):
    # "gemm" runs two shapes each step: 100 µs then 300 µs alone (step 1); in step 2 each has nccl beside it
    # for 1/6 of its time and takes 20 % longer (120, 360): per call site (the k-th gemm of its step) s =
    # 0.2 / (1/6) = 1.2. Without steps the name's alone instances (100, 300) do not do the same work: no
    # reference, no fit (and a note).
    start = [0, 100, 400, 1000, 1120, 1000, 1120]
    end = [100, 400, 410, 1120, 1480, 1020, 1180]
    stream, cat = [0, 0, 1, 0, 0, 1, 1], [C, C, X, C, C, X, X]
    names = ["gemm", "gemm", "nccl", "gemm", "gemm", "nccl", "nccl"]
    step = [1, 1, 1, 2, 2, 2, 2] if with_steps else None
    g = _graph(0, start, end, stream=stream, prev=[-1, 0, -1, 1, 3, 2, 5], off=start, cat=cat, names=names,
               step=step)
    m = estimate(_run([g]).sg)
    gemm = np.asarray(cat) == C
    if with_steps:
        assert np.allclose(m.slowdown[gemm], 1.2) and m.sources["compute: kernel"] == 4
    else:
        assert not m.slowdown[gemm].any() and m.sources == {"communication: none": 3, "compute: none": 4}


def _waits_beside_gemm():
    """Two ranks, µs. Rank 0: "gemm" on stream 0, "nccl" collectives on stream 1 (a "pack" copy 800-850 before
    the third, launched with it at 800), each other activity launched when it started; rank 1: only the nccl
    kernels, launched at 400, 600, 900, 1100.

    - gemm alone: 0-100, 200-300;
    - beside a transfer: gemm 400-520 with nccl 400-420 and 600-720 with 600-620 (both ranks arrive together):
      20 % longer with 1/6 of its time beside the transfer;
    - beside a wait: gemm 800-900 with nccl 850-920 (rank 1 arrives at 900: it waits 850-900, transfers
      900-920) and 1000-1100 with nccl 1050-1120: half its time beside a kernel that only waits, and its
      alone duration.

    The fit: ft = (1/6, 1/6, 0, 0), fw = (0, 0, 1/2, 1/2), y = (0.2, 0.2, 0, 0): with wait weight w the
    slope over ft + w fw is 0.0667 / (0.0556 + 0.5 w^2), the residual 0 only at w = 0, where s = 1.2.
    One slope over the whole share (the wait counted as a transfer) would be 0.0667 / 0.5556 = 0.12."""
    start0 = [0, 200, 400, 400, 600, 600, 800, 800, 850, 1000, 1050]
    end0 = [100, 300, 520, 420, 720, 620, 900, 850, 920, 1100, 1120]
    stream0 = [0, 0, 0, 1, 0, 1, 0, 1, 1, 0, 1]
    cat0 = [C, C, C, X, C, X, C, 2, X, C, X]
    names0 = ["gemm", "gemm", "gemm", "nccl", "gemm", "nccl", "gemm", "pack", "nccl", "gemm", "nccl"]
    prev0 = [-1, 0, 1, -1, 2, 3, 4, 5, 7, 6, 8]
    off0 = start0[:8] + [800] + start0[9:]  # the third nccl launched with the copy, behind it on stream 1
    g0 = _graph(0, start0, end0, stream=stream0, prev=prev0, off=off0, cat=cat0, names=names0)
    start1 = [400, 600, 900, 1100]
    g1 = _graph(1, start1, [420, 620, 920, 1120], stream=[1] * 4, prev=[-1, 0, 1, 2], off=start1, cat=[X] * 4,
                names=["nccl"] * 4)
    members = pd.DataFrame({"coll_id": [0, 0, 1, 1, 2, 2, 3, 3], "rank": [0, 1] * 4,
                            "row": [3, 0, 5, 1, 8, 2, 10, 3]})
    return _run([g0, g1], members)


def test_compute_beside_a_waiting_collective_is_slowed_as_the_trace_shows():
    run = _waits_beside_gemm()
    m = estimate(run.sg)
    gemm = np.flatnonzero(run.sg.cat == C)
    assert m.wait_weight == 0.0 and np.allclose(m.slowdown[gemm], 1.2)
    assert _us(run.base.start) == _us(run.sg.start) and _us(run.base.end) == _us(run.sg.end)
    # without the copy, the third nccl arrives at 800 and waits beside the whole gemm 800-900: the gemm keeps
    # its 100 µs (with the wait counted as a transfer: alone 100 / (1 + 0.12 x 0.5) = 94.3, beside the wait for
    # all its span 94.3 x 1.12 = 105.7) and the transfer still runs 900-920
    inp, rp = run.run([parse_fix("drop=^pack$")])
    assert _us(rp.start[[6, 8]]) == [800, 800] and _us(rp.end[[6, 8]]) == [900, 920]


def test_an_instance_longer_than_its_names_alone_work_allows_is_not_fitted():
    # no steps: "gemm" ran alone 100 µs twice; two more gemms took 200 with nccl beside 1/10 of each. Slowed only
    # there they could take at most 100 / (1 - 0.1) = 111: they do other work (another shape) and have no
    # reference; fitted against 100 they would give s = (200 / 100 - 1) / 0.1 = 10. Nothing else ran beside
    # nccl: no fit, durations kept.
    start = [0, 100, 300, 300, 500, 500]
    end = [100, 200, 500, 320, 700, 520]
    g = _graph(0, start, end, stream=[0, 0, 0, 1, 0, 1], prev=[-1, 0, 1, -1, 2, 3], off=start,
               cat=[C, C, C, X, C, X], names=["gemm", "gemm", "gemm", "nccl", "gemm", "nccl"])
    m = estimate(_run([g]).sg)
    assert not m.slowdown.any() and m.sources == {"communication: none": 2, "compute: none": 4}
