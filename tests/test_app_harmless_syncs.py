"""A sync that caused no GPU idle is shown as harmless: apart on the Timeline and the Syncs page, and left out of
the host-sync totals the Syncs page and the Diff compare; dense sync markers are thinned, not merged into a band.

On the bundled ag-gemm runs (tuned: only its closing cudaDeviceSynchronize; host-sync: a sync per step), with the
expected figures from analyzers.report.analyze, and on hand-made marker frames.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analyzers.io.load import load_traces
from analyzers.report import analyze
from viz import labels
from viz.sync_markers import thin

from .test_app_decision import SAMPLES, _app, bundled  # noqa: F401 - fixture

RUNS = ("ag-gemm/tuned", "ag-gemm/host-sync")


@pytest.fixture(scope="module")
def syncs() -> dict[str, pd.DataFrame]:
    out = {}
    for label in RUNS:
        rep = analyze(load_traces(sorted((SAMPLES / label).glob("rank*.json.gz")), label=label))
        out[label] = pd.concat(list(rep.syncs.values()), ignore_index=True)
    return out


def test_thin_keeps_the_costliest_per_lane_and_pixel() -> None:
    # window 0..1000 ns over 100 px: 14 px = 140 ns; three syncs within 140 ns on lane 5, one on lane 4
    f = pd.DataFrame({"start_ns": [10, 50, 120, 30], "y": [5.0, 5.0, 5.0, 4.0], "gpu_idle_ns": [0.0, 7.0, 3.0, 0.0],
                      "blocked_ns": [1.0, 1.0, 9.0, 2.0], "name": list("abcd"), "caller": [""] * 4})
    got = thin(f, 0, 1000, 100, gap_px=14)
    assert got["name"].tolist() == ["d", "b"]  # by start; b idled the GPU most in its bin
    assert got["merged"].tolist() == [1, 3]
    assert thin(f, 0, 1000, 10_000, gap_px=14)["merged"].tolist() == [1, 1, 1, 1]  # a 1.4 ns gap: every sync apart



def test_thin_keeps_markers_a_gap_apart_across_bin_edges_and_kinds() -> None:
    # 14 px = 140 ns: a at 139 and b at 141 sat in two fixed bins (0 and 1) and were drawn 0.2 px apart; b idled the
    # GPU most: kept, a counted into it; e, 150 ns from b, kept; c (harmless, once thinned apart from the harmful
    # ones and drawn over them) is 98 ns from b and 52 ns from e: counted into e, the nearer
    f = pd.DataFrame({"start_ns": [139, 141, 239, 10_000, 291], "y": [1.0] * 5,
                      "gpu_idle_ns": [5.0, 6.0, 0.0, 0.0, 1.0], "blocked_ns": [1.0] * 5, "name": list("abcde"),
                      "caller": [""] * 5})
    got = thin(f, 0, 1000, 100, gap_px=14)
    assert got["name"].tolist() == ["b", "e", "d"] and got["merged"].tolist() == [2, 2, 1]
    assert np.diff(got["start_ns"].to_numpy()).min() >= 140

def test_timeline_draws_harmless_syncs_apart(bundled, syncs) -> None:  # noqa: F811
    at = _app(",".join(RUNS))
    at.switch_page("views/timeline.py").run()
    at.selectbox[0].set_value("whole trace").run()  # every sync, the closing ones included
    assert not at.exception and not at.error
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    rows = {"y": RUNS[0], "y2": RUNS[1]}
    for label in RUNS:
        traces = [t for t in fig["data"] if rows.get(t.get("yaxis", "y")) == label and t.get("mode") == "markers"]
        names = {t["name"] for t in traces}
        harmful = int((syncs[label]["gpu_idle_ns"] > 0).sum())
        assert ("blocking host sync (GPU idled)" in names) == (harmful > 0), (label, names)
        assert ("host sync, no GPU idle (harmless)" in names) == (harmful < len(syncs[label])), (label, names)
        for t in traces:  # a marker is no taller than its lane (22 px)
            assert t["marker"]["size"] <= 22 * 0.55


def test_syncs_page_and_diff_count_only_syncs_that_idled_the_gpu(bundled, syncs) -> None:  # noqa: F811
    at = _app(",".join(RUNS))
    at.switch_page("views/syncs.py").run()
    assert not at.exception and not at.error
    shown = [(m.label, m.value) for m in at.metric]
    for i, label in enumerate(RUNS):
        df = syncs[label]
        harmful = df["gpu_idle_ns"] > 0
        mine = dict(shown[4 * i:4 * i + 4])
        assert mine["Syncs that idled the GPU"] == f"{int(harmful.sum()):,}"
        assert mine["Host blocked in them"] == labels.value("time", float(df.loc[harmful, "host_blocked_ns"].sum()))
        assert mine["Harmless syncs (no GPU idle)"] == f"{int((~harmful).sum()):,}"
    assert (syncs[RUNS[0]]["gpu_idle_ns"] == 0).all() and len(syncs[RUNS[0]]), "tuned: only harmless syncs"
    at.switch_page("views/diff.py").run()
    agg = at.dataframe[0].value.set_index("metric")
    row = agg.loc[labels.label("blocking_sync_ns")]
    for label in RUNS:
        df = syncs[label]
        want = float(df.loc[df["gpu_idle_ns"] > 0, "host_blocked_ns"].sum())
        assert row[label] == labels.value("time", want), (label, row[label])
    assert np.isclose(float(agg.loc[labels.label("sync_gpu_idle_ns"), RUNS[1]].replace(",", "").removesuffix(" ms")),
                      syncs[RUNS[1]]["gpu_idle_ns"].sum() / 1e6, atol=5e-4)
