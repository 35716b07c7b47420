"""The graph's memory layout: packed rank graphs, int32 indices, slim rank graphs in the set graph, and replay
inputs that share the graph's arrays until a fix writes. Each must leave every answer as it was."""

from __future__ import annotations

import pickle
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from analyzers.graph.fixes import SHARED, Fix, apply_fixes, baseline_inputs, own, reshared, unshared
from analyzers.graph.rank_graph import JOINED, SLIM_ARRAYS, PackedGraph, RankGraph, build_rank_graph, narrowed
from analyzers.graph.set_graph import SetGraph, build_set_graph
from analyzers.syncs.blocking import blocking_syncs

ROOT = Path(__file__).resolve().parents[1]
SET = ROOT / "sample_traces" / "fsdp" / "zero3"


@pytest.fixture(scope="module")
def rank_graphs() -> dict[int, RankGraph]:
    from analyzers.io.load import load_traces

    traces = load_traces([SET])
    return {r: build_rank_graph(t, blocking_syncs(t, None), r"^ProfilerStep#(\d+)$") for r, t in traces.ranks.items()}


def test_narrowed_keeps_int64_where_a_value_does_not_fit():
    assert narrowed(np.array([-(2**31), 2**31 - 1])).dtype == np.int32
    assert narrowed(np.array([0, 2**31])).dtype == np.int64
    assert narrowed(np.array([-(2**31) - 1])).dtype == np.int64
    assert narrowed(np.zeros(0, dtype=np.int64)).dtype == np.int64


def test_rank_graph_indices_are_int32_and_times_int64(rank_graphs):
    g = rank_graphs[0]
    assert g.n > 1000
    assert g.prev.dtype == g.seg.dtype == g.name_id.dtype == np.int32
    assert g.start.dtype == g.end.dtype == g.seg_base.dtype == g.sync_end.dtype == np.int64


def test_packed_graph_unpacks_to_the_same_graph_in_a_fraction_of_the_bytes(rank_graphs):
    g = rank_graphs[0]
    p = PackedGraph(g)
    u = p.unpack()
    assert (p.n, p.n_seg, p.n_sync, p.rank) == (g.n, len(g.seg_base), len(g.sync_seg), g.rank)
    for f in fields(RankGraph):
        a, b = getattr(g, f.name), getattr(u, f.name)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b), f.name
        else:
            assert a == b, f.name
    raw = sum(getattr(g, f.name).nbytes for f in fields(RankGraph) if isinstance(getattr(g, f.name), np.ndarray))
    assert len(p.packed) < raw / 3


def _arrays(sg: SetGraph) -> dict[str, np.ndarray]:
    return {f.name: getattr(sg, f.name) for f in fields(SetGraph) if isinstance(getattr(sg, f.name), np.ndarray)}


def test_set_graph_from_packed_graphs_is_the_same_and_keeps_slim_graphs(rank_graphs):
    offsets = {0: 0, 1: 12_345}
    plain = build_set_graph(rank_graphs, offsets, None, None)
    packed = build_set_graph({r: PackedGraph(g) for r, g in rank_graphs.items()}, offsets, None, None)
    a, b = _arrays(plain), _arrays(packed)
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), k
    assert plain.n == sum(g.n for g in rank_graphs.values())
    # the graphs given are left whole; the set keeps slim ones whose start / end are its own (aligned) times
    assert all(getattr(g, f) is not None for g in rank_graphs.values() for f in JOINED)
    for r, slim in packed.graphs.items():
        lo = packed.base[r]
        assert all(getattr(slim, f) is None for f in JOINED)
        assert np.array_equal(slim.start, packed.start[lo:lo + slim.n])
        assert np.array_equal(slim.start - offsets[r], rank_graphs[r].start)
        for f in SLIM_ARRAYS:
            assert np.array_equal(getattr(slim, f), getattr(rank_graphs[r], f)), f


def test_replay_inputs_share_the_graph_arrays_until_a_fix_writes(rank_graphs):
    sg = build_set_graph(rank_graphs, {}, None, None)
    inp = baseline_inputs(sg)
    assert np.shares_memory(inp.off, sg.off) and np.shares_memory(inp.latency, sg.latency)
    with pytest.raises(ValueError):  # a write that forgot own() fails loudly, never edits the graph
        inp.off[0] = 1
    before = sg.off.copy()
    own(inp, "off")[:] = 7
    assert (inp.off == 7).all() and np.array_equal(sg.off, before) and not np.shares_memory(inp.off, sg.off)
    fixed = apply_fixes(sg, [Fix("launch-gaps")])
    assert (fixed.off == 0).all() and np.array_equal(sg.off, before)


def test_inputs_back_from_another_process_share_the_graph_again(rank_graphs):
    sg = build_set_graph(rank_graphs, {}, None, None)
    for fix, changed in (([], ()), ([Fix("launch-gaps")], ("off",))):
        made = apply_fixes(sg, fix)
        before = {k: getattr(made, k).copy() for k in SHARED}
        sent = unshared(sg, made)
        assert [k for k in SHARED if getattr(sent, k) is not None] == list(changed)
        assert all(getattr(made, k) is not None for k in SHARED)  # the sender's own inputs are left whole
        inp = pickle.loads(pickle.dumps(sent))  # as pricing's forked process sends it back
        reshared(sg, inp)
        for k in SHARED:
            assert np.array_equal(getattr(inp, k), before[k]), k
            assert np.shares_memory(getattr(inp, k), getattr(sg, k)) == (k not in changed), k
        copied = pickle.loads(pickle.dumps(made))  # an equal copy is shared again too
        reshared(sg, copied)
        assert all(np.shares_memory(getattr(copied, k), getattr(sg, k)) == (k not in changed) for k in SHARED)
