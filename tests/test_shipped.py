"""What a per-rank worker sends back for `analyze`: the same values in fewer bytes."""

from __future__ import annotations

import pandas as pd

from analyzers.io.load import load_traces
from analyzers.overlap.metrics import AnalysisOptions
from analyzers.report import RankStage, analyze
from analyzers.timeline.model import GPU_STRING_COLUMNS

from .conftest import SAMPLES

SET = SAMPLES / "ag-gemm" / "host-sync"


def test_shipped_strings_are_categoricals_with_the_same_values():
    full = load_traces([SET])
    stage = RankStage(AnalysisOptions(), diagnose=True, send_host_tables=False)
    for t in full:
        g = stage.shipped(t).gpu
        for c in GPU_STRING_COLUMNS:
            assert isinstance(g[c].dtype, pd.CategoricalDtype)
            assert g[c].astype(object).tolist() == t.gpu[c].astype(object).tolist()
        assert g.drop(columns=list(GPU_STRING_COLUMNS)).equals(t.gpu.drop(columns=list(GPU_STRING_COLUMNS)))
        assert g.memory_usage(deep=True).sum() < t.gpu.memory_usage(deep=True).sum()


def test_analysis_of_shipped_traces_is_the_same_document():
    opts = AnalysisOptions()
    slim = load_traces([SET], per_rank=RankStage(opts, diagnose=True, send_host_tables=False))
    plain = load_traces([SET])
    assert analyze(slim, opts).to_dict() == analyze(plain, opts).to_dict()
