"""`whatif`'s path to the graph (report.graph_run, with the per-rank stage's graph_only results) gives
the very predictions `analyze`'s graph gives, and its results never stand in for `analyze`'s."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzers.graph.analysis import whatif
from analyzers.graph.fixes import Fix, parse_fix
from analyzers.io.load import load_traces
from analyzers.io.plain import to_json
from analyzers.overlap.metrics import AnalysisOptions
from analyzers.report import RankStage, analyze, graph_run, precomputed_results
from analyzers.timeline.iterations import StepSelection

ROOT = Path(__file__).resolve().parents[1]
FIXES = [[Fix("launch-gaps")], [Fix("host-syncs"), Fix("peer-wait")], [Fix("serialized-streams")],
         [parse_fix("compute-speed=2"), Fix("comm-contention")]]


@pytest.mark.parametrize("folder", ["sample_traces/ag-gemm/host-sync", "sample_traces/fsdp/zero3",
                                    "sample_traces/symm-mem/two-stream-sleep"])
def test_graph_run_predicts_what_analyze_graph_predicts(folder):
    options = AnalysisOptions()
    full = analyze(load_traces([ROOT / folder], jobs=1, per_rank=RankStage(options))).graph_run
    lean = load_traces([ROOT / folder], jobs=1, per_rank=RankStage(options, True, False, graph_only=True))
    assert precomputed_results(lean, options, True) == {}  # analyze would not take them: no metrics
    assert set(precomputed_results(lean, options, True, metrics=False)) == set(lean.ranks)
    run = graph_run(lean, options)
    for fixes in FIXES:
        assert to_json(whatif(run, fixes)) == to_json(whatif(full, fixes)), fixes


def test_graph_run_refuses_a_step_selection():
    traces = load_traces([ROOT / "sample_traces/ag-gemm/host-sync"])
    with pytest.raises(ValueError):
        graph_run(traces, AnalysisOptions(steps=StepSelection.parse("1")))
