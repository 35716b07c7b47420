"""The Overview's first screen answers which run is fastest, why, and what fixing it buys; the Diff agrees.

Runs the app under Streamlit's AppTest on bundled runs the app's code was not written against (gemm-rs,
ag-gemm-nsys, the public HTA pair without a manifest). Expected figures come from the manifests read here with
json and from the analyzers, never from literals.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from analyzers.graph.analysis import whatif
from analyzers.graph.fixes import FIX_OF_FINDING, Fix
from analyzers.io.load import load_traces
from analyzers.report import analyze
from app import data
from viz.decision import RUNNER, TRACED, Timing, disagreement

from .conftest import HTA_TRACES, ROOT
from .test_app import KINETO_PAIR, TIMEOUT

MAIN = str(ROOT / "app" / "main.py")
SAMPLES = ROOT / "sample_traces"


@pytest.fixture()
def bundled(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for var in (data.ENV_SAMPLES, data.ENV_ALLOWED_ROOTS, data.ENV_APP_PATHS):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(data.ENV_RUNS_DIR, str(tmp_path / "runs"))
    return SAMPLES


def _app(runs: str | None = None):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT)
    if runs:
        at.query_params["runs"] = runs
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _unescape(text: str) -> str:
    return text.replace("\\", "")


def _decision(at):
    return next(d.value for d in at.dataframe if "best timing (ms)" in d.value.columns)


def _manifest(label: str) -> dict:
    return json.loads((SAMPLES / label / "manifest.json").read_text())


def _runner_iqr(label: str) -> tuple[float, float, float]:
    """The manifest's timed figure and the interquartile range of its slowest rank's samples, in ms."""
    m = _manifest(label)
    slowest = max(m["ranks"], key=lambda r: r["timings_ms"]["variant"]["median"])
    lo, hi = np.percentile(slowest["timings_ms"]["variant"]["samples"], [25, 75])
    return m["timings_ms"]["variant_ms"], float(lo), float(hi)


def _traced(label: str, paths: list[Path] | None = None):
    rep = analyze(load_traces(paths or sorted((SAMPLES / label).glob("rank*.json.gz")), label=label))
    steps: dict[int, float] = {}
    for m in rep.ranks:
        for s, a, b in zip(m.iterations["step"], m.iterations["window_start_ns"], m.iterations["window_end_ns"],
                           strict=True):
            steps[int(s)] = max(steps.get(int(s), 0.0), float(b - a) / 1e6)
    return rep, float(np.median(list(steps.values()))), min(steps.values()), max(steps.values())


def test_overview_ranks_runs_by_the_runners_timing_with_price_and_fix_all(bundled: Path) -> None:
    labels = ["gemm-rs/baseline", "gemm-rs/ring", "gemm-rs/tuned"]
    at = _app(",".join(labels))
    table = _decision(at)
    want = sorted(labels, key=lambda lb: _manifest(lb)["timings_ms"]["variant_ms"])
    assert table["run"].tolist() == want, "fastest first, by the runner's CUDA-event figure"
    assert table["best timing (ms)"].tolist() == [f"{_manifest(lb)['timings_ms']['variant_ms']:,.3f}" for lb in want]
    assert set(table["source"]) == {RUNNER}
    assert _unescape(at.success[0].value).startswith(f"Fastest: {want[0]}, ")
    for _, row in table.iterrows():
        rep, med, lo, hi = _traced(row["run"])
        assert row["traced step"].startswith(f"{med:,.3f} ms") and f"{lo:,.3f}–{hi:,.3f} ms" in row["traced step"]
        priced = sorted((f for f in rep.findings if f.saving_ns is not None), key=lambda f: -f.saving_ns)
        if priced:
            assert row["top finding"] == priced[0].title
        fixes = sorted({FIX_OF_FINDING[f.id] for f in rep.findings if f.id in FIX_OF_FINDING})
        if fixes:
            w = whatif(rep.graph_run, [Fix(f) for f in fixes])
            assert f"{w['predicted_step_ns'] / 1e6:,.3f} ms per step" in row["fix all (replayed step)"]
        else:
            assert row["fix all (replayed step)"] == "no fix to replay"


def test_disagreement_is_warned_only_beyond_both_spreads(bundled: Path) -> None:
    labels = ["ag-gemm-nsys/sync-in-loop", "ag-gemm-nsys/sync-before-loop", "ag-gemm/baseline"]
    at = _app(",".join(labels))
    warnings = [_unescape(w.value) for w in at.warning]
    disagree = []
    for label in labels:
        paths = sorted(p for p in (SAMPLES / label).iterdir() if p.name != "manifest.json")
        _, med, lo, hi = _traced(label, paths)
        _, rlo, rhi = _runner_iqr(label)
        apart = rhi < lo or hi < rlo
        disagree.append(apart)
        assert any(w.startswith(f"{label}: the runner's timing") for w in warnings) == apart, (label, warnings)
    assert any(disagree), "one of these runs' traced step lies outside its timed iterations' range"


def test_disagreement_by_hand() -> None:
    def t(m: float, lo: float, hi: float, src: str = RUNNER) -> Timing:
        return Timing(m, lo, hi, src, "range")

    assert disagreement(t(5.0, 4.9, 5.1), t(5.3, 5.2, 5.4, TRACED)) is not None  # 5.1 < 5.2: apart
    assert disagreement(t(5.0, 4.9, 5.2), t(5.3, 5.2, 5.4, TRACED)) is None  # they touch at 5.2
    assert disagreement(t(5.0, 5.0, 5.0), None) is None


def test_every_command_line_run_is_selected_and_a_run_without_manifest_uses_its_traced_step(
        bundled: Path, monkeypatch: pytest.MonkeyPatch, hta_dir: Path) -> None:
    folders = [SAMPLES / "ag-gemm" / v for v in ("baseline", "sync-in-loop", "sync-before-loop", "host-sync")]
    pair = [str(HTA_TRACES / n) for n in KINETO_PAIR]
    monkeypatch.setenv(data.ENV_APP_PATHS, ":".join([*map(str, folders), *pair]))
    at = _app()
    selected = at.session_state["os_selected"]
    assert len(selected) == 5, selected  # four run folders and one run of two files: none dropped
    table = _decision(at)
    assert len(table) == 5
    hta = table[table["source"] == TRACED]
    assert len(hta) == 1 and hta["runner timing"].iloc[0] == "not recorded"
    _, med, _, _ = _traced("hta", [Path(p) for p in pair])
    assert hta["best timing (ms)"].iloc[0] == f"{med:,.3f}"


@pytest.mark.parametrize("a,b,box", [("ag-gemm/host-sync", "ag-gemm/tuned", "success"),
                                     ("ag-gemm/tuned", "ag-gemm/host-sync", "warning")])
def test_diff_box_follows_the_verdict_and_reads_forward(bundled: Path, a: str, b: str, box: str) -> None:
    at = _app(f"{a},{b}")
    at.switch_page("views/diff.py").run()
    assert not at.exception
    boxes = {"success": at.success, "warning": at.warning, "info": at.info}
    assert not at.error
    verdict = [_unescape(x.value) for x in boxes[box] if "Verdict" in x.value]
    assert verdict, {k: [x.value for x in v] for k, v in boxes.items()}
    text = verdict[0]
    assert "tuned" in text.split(" is ")[0] or text.startswith("Verdict: ag-gemm/tuned")
    if box == "warning":  # A (tuned) wins: its clauses compare, they never run an arrow from A's figure to B's
        assert "->" not in text and " in ag-gemm/tuned vs " in text
    best = [_unescape(c.value) for c in at.caption if c.value.startswith("By best timing")]
    assert best and best[0].endswith("ag-gemm/tuned is " + best[0].rsplit(" is ", 1)[1])


def test_fix_all_and_price_in_words_by_hand() -> None:
    from viz.decision import fix_all_text, price_text

    assert fix_all_text({"replayed_step_ns": 4_344_000, "predicted_step_ns": 3_800_000, "saving_fraction": 0.125}) \
        == "4.344 → 3.800 ms per step (−12.5%)"
    assert fix_all_text({"replayed_step_ns": 3_264_000, "predicted_step_ns": 3_264_000, "saving_fraction": 0.0}) \
        == "3.264 ms per step (no change)"
    assert fix_all_text(None) == "no fix to replay"
    assert fix_all_text({"unavailable": "not replayed: no dependency graph for this run"}).startswith("not replayed")
    assert price_text(547_430, 0.126) == "saves 0.547 ms per step (12.6%)"
    assert price_text(0, 0.0) == "saves nothing per step" and price_text(None, None) == "not priced"


def test_peer_wait_line_by_hand() -> None:
    from types import SimpleNamespace

    import pandas as pd

    from viz.decision import peer_wait_text

    parts = {"compute": 1_000_000, "peer_wait": 3_000_000}
    steps = [{"step": 1, "rank": 1, "peer_wait": [{"late_rank": 0, "ns": 2_900_000, "cause": "compute: gemm"}]},
             {"step": 2, "rank": 1, "peer_wait": [{"late_rank": 1, "ns": 1, "cause": "self"}]}]
    it = pd.DataFrame({"idle_ns": [400_000, 600_000]})
    rep = SimpleNamespace(
        critical_path={"per_rank": {"0": {"mean_step_ns": 5_000_000, "parts": {"peer_wait": 100}},
                                    "1": {"mean_step_ns": 4_000_000, "parts": parts}}, "steps": steps},
        ranks=[SimpleNamespace(rank=1, iterations=it)])
    text = peer_wait_text(rep)
    # rank 1: 3 of 4 ms waiting (75.0%) for rank 0 (never for itself); its idle per step: median 0.5 ms
    assert text.startswith("Peer wait is 75.0% of rank 1's step (3.000 of 4.000 ms): its collectives wait for "
                           "rank 0 (busy with compute: gemm).")
    assert "rank 1's GPU idle per step is 0.500 ms" in text
    rep.critical_path["per_rank"]["1"]["parts"] = {"peer_wait": 300_000}  # under 10 % of the step: no line
    assert peer_wait_text(rep) is None


def test_sync_idle_line_by_hand() -> None:
    from types import SimpleNamespace

    from viz.decision import sync_idle_text

    finding = SimpleNamespace(id="host-blocking-sync", title="rank 1: 4 blocking host syncs", saving_ns=500_000,
                              saving_fraction=0.125)
    rep = SimpleNamespace(
        critical_path={"per_rank": {"0": {"mean_step_ns": 4_000_000, "parts": {"sync_idle": 300_000}},
                                    "1": {"mean_step_ns": 4_000_000, "parts": {"sync_idle": 800_000}}}},
        findings=[finding])
    # rank 1: 0.8 of 4 ms (20.0%) waiting on a blocked host, tied to the host-sync finding and its 0.5 ms price
    assert sync_idle_text(rep) == (
        "Blocking-sync idle is 20.0% of rank 1's critical path (0.800 of 4.000 ms per step): the GPU waited for a "
        "host blocked in a sync. That is the GPU idle time of the finding \"rank 1: 4 blocking host syncs\", and "
        "removing those syncs saves 0.500 ms per step (12.5%).")
    rep.findings = []
    assert sync_idle_text(rep).endswith("blocked in a sync.")
    rep.critical_path["per_rank"]["1"]["parts"] = {"sync_idle": 390_000}  # under 10 % of the step: no line
    assert sync_idle_text(rep) is None
