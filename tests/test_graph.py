"""The dependency graph: replays and critical paths of tiny hand-made graphs worked out by hand, and
the replay's fidelity on the real traces in the repository."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyzers.errors import BadInputError, OptionValueError
from analyzers.graph.analysis import (
    MAX_STEPS_LISTED,
    GraphRun,
    critical_path_document,
    critical_path_section,
    critical_steps_table,
    whatif,
)
from analyzers.graph.fixes import Fix, parse_fix
from analyzers.graph.rank_graph import CAT_CODES, RankGraph
from analyzers.graph.set_graph import build_set_graph

ROOT = Path(__file__).resolve().parents[1]
US = 1_000


def _graph(rank: int, start, end, *, stream=None, prev=None, seg=None, off=None, dep=None, cat=None,
           seg_base=(0,), seg_opened_by=(-1,), syncs=(), sync_after=(), latency=0, names=None, step=None) -> RankGraph:
    """A rank graph from lists in µs; syncs: (seg, off, awaited, lat, dur, end) tuples in µs; names: one per
    activity (activities of the same name are instances of one kernel), default one name each."""
    n = len(start)
    a = lambda v, fill: np.asarray(v if v is not None else [fill] * n, dtype=np.int64)  # noqa: E731
    sy = np.asarray(syncs, dtype=np.int64).reshape(-1, 6)
    return RankGraph(
        rank=rank, start=a(start, 0) * US, end=a(end, 0) * US,
        cat=np.asarray(cat if cat is not None else [CAT_CODES["compute"]] * n, dtype=np.int8),
        stream=a(stream, 0), name_id=np.arange(n) if names is None else np.unique(names, return_inverse=True)[1],
        prev=a(prev, -1), seg=a(seg, 0), off=a(off, 0) * US,
        dep=a(dep, -1), dep_lat=np.zeros(n, dtype=np.int64), step=a(step, -1),
        seg_base=np.asarray(seg_base, dtype=np.int64) * US, seg_opened_by=np.asarray(seg_opened_by, dtype=np.int64),
        sync_seg=sy[:, 0], sync_off=sy[:, 1] * US, sync_awaited=sy[:, 2], sync_lat=sy[:, 3] * US,
        sync_dur=sy[:, 4] * US, sync_end=sy[:, 5] * US,
        sync_after=np.asarray(sync_after, dtype=np.int64).reshape(-1, 2),
        launch_latency_ns=latency * US, turnaround_ns=0,
        names=[f"k{rank}.{i}" for i in range(n)] if names is None else sorted(set(names)),
        stream_labels=["s0", "s1"], has_steps=False)


def _run(graphs, members=None) -> GraphRun:
    colls = None
    if members is not None:
        colls = pd.DataFrame({"coll_id": sorted(set(members["coll_id"])), "peers_known": True})
    return GraphRun(build_set_graph({g.rank: g for g in graphs}, {}, members, colls))


def _us(a) -> list[float]:
    return (np.asarray(a) / US).tolist()


def test_launch_bound_chain():
    # three 10 µs kernels launched 50 µs apart (latency 5): the host sets the pace
    g = _graph(0, [5, 55, 105], [15, 65, 115], prev=[-1, 0, 1], off=[0, 50, 100], latency=5)
    run = _run([g])
    assert _us(run.base.start) == [5, 55, 105] and _us(run.base.end) == [15, 65, 115]
    cp = critical_path_section(run)
    walked = cp["steps"][0]["walked"]
    assert walked["compute"] == 10 * US and walked["launch_gaps"] == 100 * US
    assert sum(walked.values()) == 110 * US  # the step: 5 .. 115
    # removing the gaps saves 80 µs: 80 charged to them, the other 20 to the compute the path moves to
    parts = cp["steps"][0]["parts"]
    assert parts["compute"] == 30 * US and parts["launch_gaps"] == 80 * US and sum(parts.values()) == 110 * US
    # launches that cost nothing: the kernels run back to back after one launch latency
    res = whatif(run, [Fix("launch-gaps")])
    assert res["predicted_step_ns"] == 30 * US and res["replayed_step_ns"] == 110 * US


def test_many_launch_bound_steps_by_hand():
    # 120 steps of one 10 µs kernel each, launched d_i µs apart (50..60, latency 5): step i (but the last) runs
    # from kernel i's start to kernel i+1's, d_i µs, all of it the host's launches (walked launch gaps: the
    # 5 µs latency and the host's d_i - 5 before it); with free launches the kernels run back to back, the step
    # is 10 µs: d_i - 10 charged to the gaps, the 10 the path moves to go to compute. The last step: its kernel.
    n = 120
    gaps = [50 + (i * 37) % 11 for i in range(n - 1)]
    off = np.r_[0, np.cumsum(gaps)].tolist()
    g = _graph(0, [o + 5 for o in off], [o + 15 for o in off], prev=[-1, *range(n - 1)], off=off, latency=5,
               step=list(range(n)))
    run = _run([g])
    cp = critical_path_section(run)
    steps = cp["steps"]
    assert [s["step"] for s in steps] == list(range(n))
    assert [s["replayed_ns"] for s in steps] == [d * US for d in gaps] + [10 * US]
    for s, d in zip(steps, gaps, strict=False):
        assert s["walked"] == {**dict.fromkeys(s["walked"], 0), "launch_gaps": d * US}
        assert s["parts"] == {**dict.fromkeys(s["parts"], 0), "launch_gaps": (d - 10) * US, "compute": 10 * US}
    assert steps[-1]["parts"] == {**dict.fromkeys(steps[-1]["parts"], 0), "compute": 10 * US}
    mean = (sum(gaps) + 10) / n
    rank = cp["per_rank"]["0"]
    assert rank["mean_step_ns"] == round(mean * US)
    assert rank["parts"]["compute"] == 10 * US
    assert rank["parts"]["launch_gaps"] == round((sum(gaps) - 10 * (n - 1)) / n * US)
    assert cp["fidelity"]["median_abs_error"] == 0.0  # the replay of host-paced launches is exact
    # the document lists the slowest MAX_STEPS_LISTED steps, in step order, and counts them all
    doc = critical_path_document(cp)
    slowest = sorted(range(n), key=lambda i: (-steps[i]["replayed_ns"], i))[:MAX_STEPS_LISTED]
    assert [s["step"] for s in doc["steps"]] == sorted(slowest)
    assert doc["n_steps"] == n and doc["fidelity"]["n_steps"] == n
    assert len(doc["fidelity"]["steps"]) == MAX_STEPS_LISTED
    table = critical_steps_table(cp)
    assert table["launch_gaps_ns"].tolist() == [(d - 10) * US for d in gaps] + [0]
    assert table["walked_launch_gaps_ns"].tolist() == [d * US for d in gaps] + [0]
    assert (table["measured_ns"] == table["replayed_ns"]).all() and (table["error"] == 0).all()


def test_blocking_sync_and_its_fix():
    # A (100 µs) launched at 0; the host syncs at 10 on A (returns 3 µs after A ends), then launches B
    # 2 µs after the return; B depends on A only through the sync
    g = _graph(0, [5, 115], [105, 125], stream=[0, 1], seg=[0, 1], off=[0, 2], seg_base=(0, 108),
               seg_opened_by=(-1, 0), syncs=[(0, 10, 0, 3, 98, 108)], sync_after=[(0, 1)], latency=5)
    run = _run([g])
    assert _us(run.base.start) == [5, 115] and _us(run.base.end) == [105, 125]
    step = critical_path_section(run)["steps"][0]
    walked = step["walked"]
    assert walked["compute"] == 110 * US and walked["sync_idle"] == 5 * US and walked["launch_gaps"] == 5 * US
    # launches that cost nothing start B 2 µs sooner: the launch latency's 3 µs stay, counted as other
    parts = step["parts"]
    assert parts["launch_gaps"] == 2 * US and parts["other"] == walked["other"] + 3 * US
    assert [(b["part"], b["saving_ns"], b["left_ns"]) for b in step["bounds"]] == [("launch_gaps", 2 * US, 3 * US)]
    # without the host block, B follows A on the GPU through an event wait: ends at 115
    res = whatif(run, [parse_fix("host-syncs")])
    assert res["predicted_step_ns"] == 110 * US  # 5 .. 115


def test_late_rank_is_named_with_its_cause():
    # rank 0: X 50 µs then collective; rank 1: Y 80 µs then collective; transfer 20 µs
    g0 = _graph(0, [0, 50], [50, 100], prev=[-1, 0], cat=[0, 1])
    g1 = _graph(1, [0, 80], [80, 100], prev=[-1, 0], cat=[0, 1])
    members = pd.DataFrame({"coll_id": [0, 0], "rank": [0, 1], "row": [1, 1]})
    run = _run([g0, g1], members)
    assert _us(run.base.end) == [50, 100, 80, 100]
    cp = critical_path_section(run)
    walked = [s for s in cp["steps"] if s["rank"] == 0] or None
    r0 = cp["per_rank"]["0"]["parts"]
    # walked: 80 µs on rank 1's path, 20 µs transfer; rank 0 waiting for nobody ends at 50 + 20 = 70: the wait
    # costs it 30 µs, the other 50 are its own compute X, where the path moves without the join
    assert r0["comm_transfer"] == 20 * US and r0["peer_wait"] == 30 * US and r0["compute"] == 50 * US
    assert sum(r0.values()) == 100 * US
    if walked:
        assert walked[0]["walked"]["peer_wait"] == 80 * US
    step = [s for s in cp["steps"]][0]
    assert step["rank"] in (0, 1)
    walked0 = critical_path_section(run)["per_rank"]["1"]["parts"]
    assert walked0["compute"] == 80 * US and walked0["peer_wait"] == 0
    # peer-wait fix: the transfer starts at the median arrival (65): rank 0 ends at 85, rank 1 still 100
    res = whatif(run, [Fix("peer-wait")])
    assert {p["rank"]: p["predicted_step_ns"] for p in res["per_rank"]} == {0: 85 * US, 1: 100 * US}


def test_peer_wait_cause_names_the_activity():
    g0 = _graph(0, [0, 50], [50, 100], prev=[-1, 0], cat=[0, 1])
    g1 = _graph(1, [0, 80], [80, 100], prev=[-1, 0], cat=[0, 1])
    members = pd.DataFrame({"coll_id": [0, 0], "rank": [0, 1], "row": [1, 1]})
    run = _run([g0, g1], members)
    from analyzers.graph.critical import walk
    res = walk(run.sg, run.base, run.inputs, 0, 0, 100 * US, 1, True)
    assert res["peer_wait"] == [{"late_rank": 1, "ns": 80 * US, "cause": "compute: k1.0"}]


COPY, BARRIER = "Memcpy PtoP (Device -> Device)", "c10d::symmetric_memory::barrier_kernel"


def test_peer_copies_join_no_one_and_barriers_join_all_four_ranks():
    """Symmetric memory on 4 ranks: each rank's GEMM (rank r: 20 + 20r µs), a 30 µs peer copy, then a barrier
    that ends when the last rank has arrived (rank 3, at 110 µs) plus 25 µs; rank 0 also runs a 50 µs kernel
    between its copy and its barrier. The i-th copies of the ranks are matched across ranks, but a copy waits
    for no peer: rank 0's ends at 50 µs, not when rank 3's copy starts (80 µs), which would push its kernel,
    its barrier arrival and so every rank's step to 155 µs."""
    g0 = _graph(0, [0, 20, 50, 100], [20, 50, 100, 135], prev=[-1, 0, 1, 2], cat=[0, 2, 0, 1],
                names=["gemm", COPY, "add", BARRIER])
    rest = [_graph(r, [0, 20 + 20 * r, 50 + 20 * r], [20 + 20 * r, 50 + 20 * r, 135], prev=[-1, 0, 1],
                   cat=[0, 2, 1], names=["gemm", COPY, BARRIER]) for r in (1, 2, 3)]
    members = pd.DataFrame({"coll_id": [0] * 4 + [1] * 4, "rank": [0, 1, 2, 3] * 2, "row": [1, 1, 1, 1, 3, 2, 2, 2]})
    run = _run([g0, *rest], members)
    assert run.sg.coll.tolist() == [-1, -1, -1, 0] + [-1, -1, 0] * 3  # only the barriers are a join
    assert _us(run.base.end) == [20, 50, 100, 135] + [v for r in (1, 2, 3) for v in (20 + 20 * r, 50 + 20 * r, 135)]
    assert run.replayed["dur_ns"].tolist() == [135 * US] * 4
    # compute twice as fast: GEMMs end at 10 + 10r, copies 30 µs later, rank 0's kernel 25 µs after its copy
    # (65); the barrier still waits for the last rank (rank 3, at 40 + 30 = 70) and ends 25 µs later everywhere
    res = whatif(run, [parse_fix("compute-speed=2")])
    assert {p["rank"]: p["predicted_step_ns"] for p in res["per_rank"]} == {r: 95 * US for r in range(4)}


@pytest.mark.parametrize("with_wait", [False, True])
def test_two_streams_with_and_without_event_wait(with_wait):
    # K1 100 µs on stream 0, K2 30 µs on stream 1, both launched at 0
    g = _graph(0, [0, 100 if with_wait else 0], [100, 130 if with_wait else 30], stream=[0, 1],
               dep=[-1, 0 if with_wait else -1])
    run = _run([g])
    assert _us(run.base.end) == ([100, 130] if with_wait else [100, 30])
    assert run.replayed["dur_ns"].iloc[0] == (130 if with_wait else 100) * US


def test_scaled_fixes_and_bad_fix():
    g = _graph(0, [0, 100], [100, 150], prev=[-1, 0], cat=[0, 1])
    run = _run([g])
    assert whatif(run, [parse_fix("compute-speed=2")])["predicted_step_ns"] == 100 * US
    assert whatif(run, [parse_fix("comm-speed=2")])["predicted_step_ns"] == 125 * US
    # drop=REGEX: the comm kernel takes no time
    assert whatif(run, [parse_fix("drop=k0\\.1")])["predicted_step_ns"] == 100 * US
    for bad in ("nope", "host-syncs=2", "drop=", "drop=("):
        with pytest.raises(BadInputError):
            parse_fix(bad)
    for bad in ("compute-speed", "compute-speed=0", "compute-speed=-2", "comm-speed=nan", "comm-speed=inf"):
        with pytest.raises(OptionValueError):  # a factor out of range is a usage error (exit 2)
            parse_fix(bad)


SETS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "sample_traces").glob("*/*") if p.is_dir())


@pytest.mark.parametrize("folder", SETS)
def test_replay_fidelity_on_sample_traces(folder):
    from analyzers.io.load import load_traces
    from analyzers.report import analyze

    rep = analyze(load_traces([ROOT / folder]))
    fid = rep.critical_path["fidelity"]
    assert fid["median_abs_error"] is not None and fid["median_abs_error"] <= 0.03, fid
    for step in rep.critical_path["steps"]:
        assert sum(step["parts"].values()) == step["replayed_ns"], step
    priced = [f for f in rep.findings if f.saving_ns is not None]
    assert [f.saving_ns for f in priced] == sorted((f.saving_ns for f in priced), reverse=True)


def test_parts_add_up_where_the_host_chain_ends_before_the_step():
    """The NCCL probe: each rank's path runs back through host syncs (communicator set-up) to a
    segment opened by no sync; what is left before it is "other", once, not a second time over
    the host time already attributed (the parts once summed to 1.5x the step)."""
    from analyzers.io.load import load_traces
    from analyzers.report import analyze

    rep = analyze(load_traces([ROOT / "tests/data/nccl-nvtx/json"]))
    steps = rep.critical_path["steps"]
    assert steps
    for step in steps:
        assert sum(step["parts"].values()) == step["replayed_ns"], step
        assert step["walked"]["sync_idle"] > 0.9 * step["replayed_ns"]  # the host waited in syncs


PUBLIC_SETS = [
    ["tests/data/public/hta/trace_filter_sampled_rank-0.json.gz",
     "tests/data/public/hta/trace_filter_sampled_rank-1.json.gz"],
    ["tests/data/public/nsys/mfu_2gpu_before.sqlite.gz"],
    ["tests/data/public/nsys/mfu_2gpu_after.sqlite.gz"],
    ["tests/data/public/nsys/h100_2gpu_1s.sqlite.gz"],
]


@pytest.mark.parametrize("files", PUBLIC_SETS, ids=lambda f: Path(f[0]).name)
def test_replay_fidelity_on_public_multi_rank_traces(files):
    from analyzers.io.load import load_traces
    from analyzers.report import analyze

    rep = analyze(load_traces([ROOT / f for f in files]))
    assert len(rep.ranks) == 2
    fid = rep.critical_path["fidelity"]
    assert fid["median_abs_error"] is not None and fid["median_abs_error"] <= 0.03, fid


@pytest.mark.parametrize("folder", ["sample_traces/fsdp/zero3", "sample_traces/ag-gemm/host-sync",
                                    "sample_traces/symm-mem/two-stream"])
def test_skipping_stream_runs_gives_the_same_replay(folder):
    """The loop skips runs of activities that only follow their stream; visiting each gives the same."""
    from analyzers.graph.fixes import apply_fixes
    from analyzers.graph.replay import replay
    from analyzers.io.load import load_traces
    from analyzers.report import analyze

    sg = analyze(load_traces([ROOT / folder])).graph_run.sg
    for fixes in ([], [Fix("launch-gaps")], [Fix("host-syncs")], [Fix("peer-wait")], [Fix("serialized-streams")],
                  [Fix("no-copies")], [Fix("comm-contention")], [parse_fix("compute-speed=2")]):
        inp = apply_fixes(sg, fixes)
        a, b = replay(sg, inp, compress=False), replay(sg, inp)
        for f in ("start", "end", "why", "arrival", "late", "seg_time", "sync_resume"):
            assert np.array_equal(getattr(a, f), getattr(b, f)), (fixes, f)
        assert a.order_violations == 0
