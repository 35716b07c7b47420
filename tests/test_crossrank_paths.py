"""The cross-rank stage's fast paths give the report its general paths give.

Keys are packed into one int64 per row when their value ranges allow (one sort, one
searchsorted per rank pair) and numbered by factorizing otherwise; step ranges come from the
per-rank stage (steps=) or are found here. Each pair must agree to the byte.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import replace

import pandas as pd
import pytest

import analyzers.crossrank.frames as frames
from analyzers.crossrank import CrossRankReport, RankSteps, analyze_cross_rank, rank_steps
from analyzers.io.load import load_traces
from analyzers.timeline.model import TraceSet

from .conftest import SAMPLES
from .synth_multi import ALLREDUCE, US, K, RankSpec, collective_run, trace_set, two_stream_run


def _same(a: CrossRankReport, b: CrossRankReport) -> None:
    assert json.dumps(a.to_dict(), sort_keys=True) == json.dumps(b.to_dict(), sort_keys=True)
    for name in ("collectives", "members", "mismatches"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)


def _edge_trimmed() -> TraceSet:
    # rank 1 holds one all-reduce more at the front; one host: trimmed where the ends coincide
    return trace_set({r: RankSpec([K(2_000 * US + i * 1_000 * US + r * 4 * US, 2_000 * US + i * 1_000 * US + 100 * US,
                                     1, ALLREDUCE) for i in range(-r, 6)], hostname="h") for r in range(2)},
                     world_size=2)


def _sets() -> dict[str, TraceSet]:
    late = {0: [0] * 6, 1: [50 * US] * 6, 2: [0, 80 * US, 0, 80 * US, 0, 0]}
    return {
        "swaps, steps, 3 ranks": two_stream_run(swap_ranks=(1, 2), swap_steps=(0, 2), n_ranks=3),
        "swaps, renumbered streams": two_stream_run(stream_ids={1: (3, 4)}),
        "offsets and a late rank": collective_run(3, arrivals=late, offsets={1: 7_000_000, 2: -3_000_000},
                                                  hostnames={0: "a", 1: "b", 2: "c"})[0],
        "edge trimmed": _edge_trimmed(),
        "sample symm-mem two-stream": load_traces(sorted(SAMPLES.joinpath("symm-mem", "two-stream")
                                                         .glob("rank?.json.gz"))),
    }


@pytest.mark.parametrize("name", list(_sets()))
def test_unpacked_keys_give_the_same_report(name, monkeypatch):
    traces = _sets()[name]
    packed = analyze_cross_rank(traces)
    monkeypatch.setattr(frames, "_PACK_LIMIT", 1)  # every key too wide: factorize / lexsort paths
    _same(packed, analyze_cross_rank(traces))


def test_precomputed_steps_give_the_same_report_and_stale_ones_are_ignored():
    traces = two_stream_run(swap_ranks=(1,), swap_steps=(0, 1), n_ranks=3)
    plain = analyze_cross_rank(traces)
    assert len(plain.mismatches)
    steps = {r: pickle.loads(pickle.dumps(rank_steps(t))) for r, t in traces.ranks.items()}  # as from a worker
    _same(plain, analyze_cross_rank(traces, steps=steps))
    stale = {0: replace(steps[0], seg=steps[0].seg[:-1]),  # another table
             1: RankSteps("other pattern", False, steps[1].seg * 0 - 2)}
    _same(plain, analyze_cross_rank(traces, steps=stale))


def test_rank_steps_marks_kernels_outside_the_steps():
    traces = two_stream_run(n_steps=2)
    s = rank_steps(traces.ranks[0])
    assert s.has_steps and set(s.seg.tolist()) == {1, 2}
    no_steps = collective_run(2, arrivals={0: [0] * 6, 1: [0] * 6})[0]
    s = rank_steps(no_steps.ranks[0])
    assert not s.has_steps and (s.seg == -2).all() and len(s.seg) == len(no_steps.ranks[0].gpu)
