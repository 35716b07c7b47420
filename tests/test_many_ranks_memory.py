"""What keeps the caller's memory bounded at many ranks: packed GPU tables, a bounded number unpacked; and
the replay covers every rank however many there are."""

from __future__ import annotations

import pickle
from dataclasses import replace

import pandas as pd
import pytest

from analyzers.io.load import load_traces
from analyzers.overlap.metrics import AnalysisOptions
from analyzers.report import RankStage, analyze
from analyzers.timeline import packed as packed_mod
from analyzers.timeline.model import TraceSet
from analyzers.timeline.packed import PackedRankTrace, packed

from .conftest import SAMPLES

SET = SAMPLES / "ag-gemm" / "host-sync"
ROOT = SAMPLES.parent


def test_packed_trace_unpacks_the_very_table():
    for t in load_traces([SET]):
        p = packed(t)
        assert isinstance(p, PackedRankTrace) and p.rank == t.rank and p.names is t.names
        assert list(p.gpu.dtypes) == list(t.gpu.dtypes)
        pd.testing.assert_frame_equal(p.gpu, t.gpu, check_exact=True)
        back = pickle.loads(pickle.dumps(p))
        pd.testing.assert_frame_equal(back.gpu, t.gpu, check_exact=True)


def test_a_real_rank_packs_to_a_tenth():
    """The packed form pays a fixed schema overhead (tiny tables grow); a real rank's table shrinks:
    the public 54 MB rank's 22,290 activities, 2.7 MB as a DataFrame, pack to about 0.17 MB."""
    t = next(iter(load_traces([ROOT / "tests/data/public/hta/df_index_resolver.json.gz"])))
    p = packed(t)
    pd.testing.assert_frame_equal(p.gpu, t.gpu, check_exact=True)
    rest = len(pickle.dumps(replace(t, gpu=t.gpu.iloc[:0])))  # the other tables travel as they are
    assert len(pickle.dumps(p)) < rest + 0.1 * len(pickle.dumps(t.gpu))
    assert p.packed_bytes() < 0.1 * t.gpu.memory_usage(deep=True).sum()


def test_at_most_unpacked_held_tables_are_unpacked():
    base = load_traces([SET]).ranks[0]
    traces = [packed(replace(base, rank=r)) for r in range(packed_mod.UNPACKED_HELD + 3)]
    for t in traces:
        assert len(t.gpu) == len(base.gpu)
        assert sum("_gpu_table" in x.__dict__ for x in traces) <= packed_mod.UNPACKED_HELD
    assert sum("_gpu_table" in x.__dict__ for x in traces) == packed_mod.UNPACKED_HELD
    assert "_gpu_table" not in traces[0].__dict__ and "_gpu_table" in traces[-1].__dict__


def test_forty_ranks_are_all_replayed():
    """No cap: a 40-rank set (copies of a 2-rank trace) gets a critical path on every rank (copies of one rank
    replay alike: the set is symmetric), a fidelity like the two ranks', and a price on its findings."""
    one = load_traces([SET], per_rank=None)
    n = 40
    ranks = {r: replace(one.ranks[r % 2], rank=r) for r in range(n)}
    ts = TraceSet(ranks=ranks, label="copies", fmt=one.fmt, world_size=n)
    rep = analyze(ts, AnalysisOptions())
    cp = rep.critical_path
    assert sorted(int(r) for r in cp["per_rank"]) == list(range(n))
    sg = rep.graph_run.sg
    assert sg.ranks == list(range(n)) and sg.n == n // 2 * (len(one.ranks[0].gpu) + len(one.ranks[1].gpu))
    assert not any("replayed on the" in note for note in cp["notes"])
    two = analyze(one, AnalysisOptions()).critical_path
    for r in range(2, n):
        assert cp["per_rank"][str(r)]["mean_step_ns"] == cp["per_rank"][str(r % 2)]["mean_step_ns"] > 0
    assert cp["fidelity"]["median_abs_error"] == pytest.approx(two["fidelity"]["median_abs_error"], abs=0.02)
    assert any(f.saving_ns is not None for f in rep.findings)


def test_rank_stage_ships_packed_tables():
    opts = AnalysisOptions()
    slim = load_traces([SET], per_rank=RankStage(opts, diagnose=True, send_host_tables=False))
    assert all(isinstance(t, PackedRankTrace) for t in slim.ranks.values())


def test_packed_syncs_read_back_as_the_frames_and_hold_a_few_unpacked():
    from analyzers.syncs.blocking import blocking_syncs
    from analyzers.timeline.packed import PackedFrame, PackedFrames

    ts = load_traces([SET])
    frames = {r: blocking_syncs(t, None) for r, t in ts.ranks.items()}
    assert all(len(df) for df in frames.values())
    many = PackedFrames({10 * i + r: PackedFrame(df) for i in range(6) for r, df in frames.items()})
    assert len(many) == 12 and list(many) == sorted(many, key=lambda k: (k // 10, k % 10))
    for k in many:
        pd.testing.assert_frame_equal(many[k], frames[k % 10], check_exact=True)
        assert many.rows(k) == len(frames[k % 10])
    assert len(many._held) == PackedFrames.HELD  # the last 8 read stay unpacked, no more
    plain = PackedFrames(frames)  # frames given as they are come back as they are
    assert all(plain[r] is df for r, df in frames.items()) and dict(plain.items()).keys() == frames.keys()


def test_analyze_keeps_syncs_packed_with_their_section_made_in_the_worker():
    from analyzers.syncs.summary import syncs_document
    from analyzers.timeline.packed import PackedFrame, PackedFrames

    options = AnalysisOptions()
    kept = load_traces([SET], jobs=2, per_rank=RankStage(options, send_host_tables=False))
    results = kept.meta["per_rank_results"]
    assert all(isinstance(res.syncs, PackedFrame) and res.sync_summary is not None for res in results.values())
    rep = analyze(kept, options)
    assert isinstance(rep.syncs, PackedFrames) and set(rep.sync_summaries) == set(kept.ranks)
    # the merged per-rank parts are the section made from the frames themselves
    assert syncs_document(dict(rep.syncs.items()), rep.sync_summaries) == syncs_document(dict(rep.syncs.items()))
    plain = analyze(load_traces([SET]), options)  # no per-rank stage: frames read here
    assert plain.sync_summaries is None and plain.to_dict()["syncs"] == rep.to_dict()["syncs"]
