"""The replay engine against a plain reference: the same times on hand-built graphs and on the bundled traces,
whatever the chunk of events the loop holds as lists, with and without skipping stream runs.

The reference below is the replay's definition written out once per activity, with none of the engine's
arrangements (no skipped runs, no chunks, no memoryviews): every event in the loop order; an activity starts at
the latest of its launch (its host segment's start + offset + launch latency), its stream predecessor's end
(+ turnaround), its event waits' ends and its SM gate; a collective's members end their transfer after the
last (or, under the peer-wait fix, the median) member's arrival; a blocking sync returns at the later of its
call and the awaited activity's end, plus its latency, and opens its segment then.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyzers.graph import replay as replay_mod
from analyzers.graph.fixes import Fix, ReplayInputs, apply_fixes, parse_fix
from analyzers.graph.replay import ANCHOR, DEP, DEP2, GATE, LAUNCH, STREAM, UNSET, loop_order, replay
from analyzers.graph.set_graph import SetGraph, build_set_graph

from .test_graph import US, _graph

ROOT = Path(__file__).resolve().parents[1]


def reference_replay(sg: SetGraph, inp: ReplayInputs) -> dict[str, np.ndarray]:
    n = sg.n
    start, end, why = [0] * n, [UNSET] * n, [ANCHOR] * n
    seg_time = sg.seg_base.tolist()
    left = np.diff(sg.coll_ptr).tolist()
    arrival, late = [0] * len(left), [-1] * len(left)
    resume = [0] * len(sg.sync_seg)
    gate = inp.gate if inp.gate is not None else np.full(n, -1)
    gate_lat = inp.gate_lat if inp.gate_lat is not None else np.zeros(n, dtype=np.int64)

    def ended(i: int) -> int:
        return end[i] if end[i] != UNSET else start[i] + int(inp.dur[i])

    for k in loop_order(sg).tolist():
        if k >= n:
            j = k - n
            call = seg_time[sg.sync_seg[j]] + int(inp.sync_off[j]) if sg.sync_seg[j] >= 0 else 0
            if inp.sync_blocks[j]:
                a = int(sg.sync_awaited[j])
                r = max(call, end[a]) if a >= 0 and end[a] != UNSET else call
                r += int(sg.sync_lat[j])
            else:
                r = call + int(inp.sync_cost[j])
            resume[j] = r
            if sg.sync_opens[j] >= 0:
                seg_time[sg.sync_opens[j]] = r
            continue
        t, w = UNSET, LAUNCH
        if sg.seg[k] >= 0:
            t = seg_time[sg.seg[k]] + int(inp.off[k]) + int(inp.latency[k])
        for src, lat, kind in ((sg.prev[k], sg.turnaround[k], STREAM), (inp.dep[k], sg.dep_lat[k], DEP),
                               (inp.dep2[k], 0, DEP2), (gate[k], gate_lat[k], GATE)):
            if src >= 0 and ended(int(src)) + int(lat) > t:
                t, w = ended(int(src)) + int(lat), kind
        if t == UNSET:
            t, w = int(sg.start[k]), ANCHOR
        start[k], why[k] = t, w
        c = int(sg.coll[k])
        if c < 0:
            end[k] = t + int(inp.dur[k])
            continue
        left[c] -= 1
        if left[c] == 0:
            members = sg.coll_nodes[sg.coll_ptr[c]:sg.coll_ptr[c + 1]].tolist()
            starts = [start[m] for m in members]
            late[c] = members[starts.index(max(starts))]
            a = max(starts) if inp.join == "max" else replay_mod._median(starts)
            arrival[c] = a
            for m, s in zip(members, starts, strict=True):
                end[m] = max(a, s) + int(inp.dur[m])
    for i in range(n):
        if end[i] == UNSET:
            end[i] = start[i] + int(inp.dur[i])
    return {"start": np.asarray(start), "end": np.asarray(end), "why": np.asarray(why), "arrival": np.asarray(arrival),
            "late": np.asarray(late), "seg_time": np.asarray(seg_time), "sync_resume": np.asarray(resume)}


def _same_as_reference(sg: SetGraph, inp: ReplayInputs, monkeypatch, chunks=(1 << 16, 3)) -> None:
    ref = reference_replay(sg, inp)
    for chunk in chunks:
        monkeypatch.setattr(replay_mod, "CHUNK", chunk)
        for compress in (True, False):
            got = replay(sg, inp, compress=compress)
            for f, want in ref.items():
                assert np.array_equal(getattr(got, f), want), (chunk, compress, f)


def _hand_built() -> list[SetGraph]:
    """A sync that opens a segment, a stream run after it, an event wait; two ranks joined at a collective
    whose late rank is rank 1; and a run of followers that starts a stream."""
    sync = _graph(0, [5, 115, 130, 140], [105, 125, 135, 150], stream=[0, 1, 1, 0], seg=[0, 1, 1, 1],
                  off=[0, 2, 3, 4], prev=[-1, -1, 1, 0], dep=[-1, -1, -1, 2], seg_base=(0, 108),
                  seg_opened_by=(-1, 0), syncs=[(0, 10, 0, 3, 98, 108)], sync_after=[(0, 1)], latency=5)
    a = _graph(0, [0, 10, 40], [10, 50, 60], stream=[0, 0, 1], prev=[-1, 0, -1], off=[0, 1, 2])
    b = _graph(1, [0, 30, 40], [30, 50, 55], stream=[0, 0, 1], prev=[-1, 0, -1], off=[0, 1, 2])
    members = pd.DataFrame({"coll_id": [7, 7], "rank": [0, 1], "row": [1, 1]})
    colls = pd.DataFrame({"coll_id": [7], "peers_known": [True]})
    chain = _graph(2, [0, 10, 20, 30, 45], [10, 20, 30, 40, 50], prev=[-1, 0, 1, 2, 3], seg=[-1] * 5)
    return [build_set_graph({0: sync}, {}, None, None), build_set_graph({0: a, 1: b}, {}, members, colls),
            build_set_graph({2: chain}, {}, None, None)]


@pytest.mark.parametrize("which", [0, 1, 2])
def test_hand_built_graphs_replay_as_the_reference(which, monkeypatch):
    sg = _hand_built()[which]
    for fixes in ([], [Fix("host-syncs")], [Fix("peer-wait")], [Fix("launch-gaps")]):
        _same_as_reference(sg, apply_fixes(sg, fixes), monkeypatch)


def test_hand_built_join_waits_for_the_late_rank():
    """Rank 0's member arrives at 10 µs, rank 1's at 30 (each after its stream's first activity): both measured
    transfers (20 µs, from the last arrival) start at 30 and end at 50."""
    sg = _hand_built()[1]
    rp = replay(sg, apply_fixes(sg, []))
    assert (rp.start[[1, 4]] // US).tolist() == [10, 30] and (rp.end[[1, 4]] // US).tolist() == [50, 50]
    assert rp.arrival.tolist() == [30 * US] and rp.late.tolist() == [4]


@pytest.mark.parametrize("folder", ["sample_traces/ag-gemm/host-sync", "sample_traces/fsdp/zero3",
                                    "sample_traces/four-gpus/ag-gemm", "sample_traces/ag-gemm-race/tuned-no-gate"])
def test_bundled_traces_replay_as_the_reference(folder, monkeypatch):
    from analyzers.graph.contention import contended_replay
    from analyzers.io.load import load_traces
    from analyzers.report import graph_run

    sg = graph_run(load_traces([ROOT / folder])).sg
    for fixes in ([], [Fix("host-syncs")], [Fix("peer-wait")], [Fix("launch-gaps")], [parse_fix("compute-speed=2")]):
        inp = contended_replay(sg, apply_fixes(sg, fixes)).inputs  # with its SM gates and contended durations
        _same_as_reference(sg, inp, monkeypatch, chunks=(1 << 16, 1000))


def test_sm_gate_replays_as_the_reference(monkeypatch):
    """The residency tests' GEMM and NCCL kernel with the event wait removed: the loop gates the NCCL kernel."""
    from analyzers.graph.contention import contended_replay
    from tests.test_graph_residency import NCCL, _serialized

    sg = build_set_graph({0: _serialized(NCCL)}, {}, None, None)
    inp = contended_replay(sg, apply_fixes(sg, [Fix("serialized-streams")])).inputs
    assert inp.gate is not None and inp.gate.tolist() == [-1, 0]
    _same_as_reference(sg, inp, monkeypatch)


@pytest.mark.parametrize("folder", ["sample_traces/fsdp/zero3", "sample_traces/four-gpus/fsdp"])
def test_overlap_shares_of_every_rank_at_once_are_each_ranks_own(folder):
    """contention.overlap_shares shifts each rank into a time range of its own; rank by rank gives the same."""
    from analyzers.graph.contention import COMM, _overlap_shares_by_rank, overlap_shares
    from analyzers.io.load import load_traces
    from analyzers.report import graph_run

    sg = graph_run(load_traces([ROOT / folder])).sg
    dur = sg.end - sg.start
    lo = np.where(sg.cat == COMM, np.maximum(sg.end - dur // 2, sg.start), sg.start)
    for weight in (1.0, 0.3):
        got = overlap_shares(sg, sg.start, sg.end, dur // 2, weight)
        assert np.array_equal(got, _overlap_shares_by_rank(sg, sg.start, sg.end, lo, weight))
        assert (got > 0).sum() > 10


def test_whatif_with_the_fixes_replayed_in_a_fork_is_the_serial_answer():
    """pricing.whatif_run replays the fixes in a forked process beside the unmodified replay: same document."""
    import copy

    from analyzers.graph.analysis import GraphRun, whatif
    from analyzers.graph.pricing import whatif_run
    from analyzers.io.load import load_traces
    from analyzers.report import graph_run

    sg0 = graph_run(load_traces([ROOT / "sample_traces/ag-gemm/host-sync"])).sg

    def fresh() -> SetGraph:  # no cache carried from one run to the next
        sg = copy.copy(sg0)
        for k in [k for k in sg.__dict__ if k.startswith("_")]:
            del sg.__dict__[k]
        return sg

    savings = []
    for fixes in ([Fix("host-syncs")], [Fix("host-syncs"), Fix("peer-wait")], [Fix("launch-gaps")],
                  [parse_fix("drop=^$")]):  # the last changes nothing: the base answers
        serial = whatif(GraphRun(fresh()), fixes)
        forked = whatif(whatif_run(fresh(), fixes, parallel=True), fixes)
        assert forked == serial, fixes
        savings.append(serial["saving_ns"])
    assert savings[0] > 0 and savings[-1] == 0
