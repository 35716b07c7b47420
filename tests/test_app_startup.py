"""How fast the app answers: the server loads and analyzes the opening runs as it starts (app/serve.py), so
the first session reads them from the cache; the Overview's first chart comes from the per-rank metrics, and
before the sidebar for the runs the server loads; a finding's evidence tables are sent only while its expander
is open."""

from __future__ import annotations

import gzip
import re
import threading
from pathlib import Path

import pytest

from app import data, preload, serve, ui

from .conftest import ROOT, SAMPLES

MAIN = str(ROOT / "app" / "main.py")


@pytest.fixture()
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The 2-rank host-sync sample in a fresh folder (a fingerprint no other test cached), given on the command
    line; its host-blocking-sync findings carry evidence."""
    run = tmp_path / "hs"
    run.mkdir()
    for p in sorted((SAMPLES / "ag-gemm" / "host-sync").glob("rank*.json.gz")):
        (run / p.name[:-3]).write_bytes(gzip.decompress(p.read_bytes()))
    monkeypatch.setenv(data.ENV_SAMPLES, str(tmp_path / "no-samples"))
    monkeypatch.setenv(data.ENV_APP_PATHS, str(run))
    monkeypatch.delenv(data.ENV_ALLOWED_ROOTS, raising=False)
    monkeypatch.setenv(data.ENV_RUNS_DIR, str(tmp_path / "runs"))
    return run


def _app():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(MAIN, default_timeout=300)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def test_split_args():
    assert serve.split_args(["--server.port", "1", "--", "/a", "/b"]) == (["--server.port", "1"], ["/a", "/b"])
    assert serve.split_args(["--server.port", "1"]) == (["--server.port", "1"], [])
    assert serve.split_args(["--"]) == ([], [])


def test_warm_up_fills_the_caches_the_first_session_reads(run_dir: Path, monkeypatch: pytest.MonkeyPatch):
    calls = {"load": 0, "host tables": 0, "analyze": 0}
    load, full, analyze = data.load_analysis_set, data.load_fingerprinted, ui.analyze

    def counting_load(*a, **k):
        calls["load"] += 1
        return load(*a, **k)

    def counting_full(*a, **k):
        calls["host tables"] += 1
        return full(*a, **k)

    def counting_analyze(*a, **k):
        calls["analyze"] += 1
        return analyze(*a, **k)

    monkeypatch.setattr(data, "load_analysis_set", counting_load)
    monkeypatch.setattr(data, "load_fingerprinted", counting_full)
    monkeypatch.setattr(ui, "analyze", counting_analyze)
    runs = preload.opening_runs([str(run_dir)])
    preload.start(runs)  # the load, in its thread, before the server imports Streamlit
    serve.warm_up(runs)  # the analysis, which takes that load over
    # the run given on the command line, loaded once (its per-rank stage in the parse workers, host tables left
    # there): the first chart's metrics and the whole analysis both come from that one load
    assert calls == {"load": 1, "host tables": 0, "analyze": 1}
    at = _app()
    # the first session found both in the cache; the Overview reads no host table
    assert calls == {"load": 1, "host tables": 0, "analyze": 1}
    assert at.session_state["os_selected"] == [f"path:{run_dir.resolve()}"]
    assert at.get("plotly_chart")


def test_warm_up_leaves_a_bad_run_to_the_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "rank0.json").write_text("{not json")
    monkeypatch.setenv(data.ENV_SAMPLES, str(tmp_path / "no-samples"))
    runs = preload.opening_runs([str(bad)])
    preload.start(runs).join()
    serve.warm_up(runs)  # no exception: the session that opens it shows the error line
    run = ui.Loaded(ui.opening_sources([str(bad)])[0][f"path:{bad.resolve()}"], data.fingerprint([str(bad)]))
    for read in (run.report, run.traces):
        with pytest.raises(Exception, match="rank0.json"):
            read()


def test_rank_report_holds_the_reports_metrics(run_dir: Path):
    src = ui.opening_sources([str(run_dir)])[0][f"path:{run_dir.resolve()}"]
    run = ui.Loaded(src, data.fingerprint(src.paths))
    quick, full = run.rank_report(), run.report()
    assert quick.cross_rank is None and quick.findings is None  # no cross-rank stage, no findings
    assert [m.rank for m in quick.ranks] == [m.rank for m in full.ranks] == [0, 1]
    for a, b in zip(quick.ranks, full.ranks, strict=True):  # the first chart's metrics are the analysis' own
        assert a is b
        assert a.whole == b.whole and a.iteration_summary == b.iteration_summary and a.notes == b.notes
        assert a.iterations.equals(b.iterations) and a.streams.equals(b.streams)
    assert (quick.fmt, quick.world_size) == (full.fmt, full.world_size)


def test_evidence_is_sent_for_open_findings_only(run_dir: Path):
    at = _app()
    boxes = [e for e in at.expander if (e.key or "").startswith("finding-open-")]
    # one host-blocking-sync finding per rank, then late-peer (rank 1 last at 9 of 12 collectives)
    assert len(boxes) == 3 and "arrives last" in boxes[2].label
    assert at.session_state[boxes[0].key] and not any(at.session_state[b.key] for b in boxes[1:])  # first open
    assert len(boxes[0].dataframe) > 0 and not any(len(b.dataframe) for b in boxes[1:])  # evidence of the open one
    assert len(boxes[1].markdown) == len(boxes[0].markdown)  # the closed one still says what, why and the fix
    at.session_state[boxes[1].key] = True  # the user opens the second finding
    at.run()
    boxes = [e for e in at.expander if (e.key or "").startswith("finding-open-")]
    assert len(boxes[1].dataframe) == len(boxes[0].dataframe) > 0  # its evidence is sent now
    scalars = boxes[1].dataframe[0].value
    assert "gpu idle total" in scalars["evidence"].tolist()  # gpu_idle_ns_total, under its registry label


def _drawing_order(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the Overview draws first, its first chart or the sidebar (each recorded once, as it is drawn)."""
    import streamlit as st

    from app import sidebar
    from viz import figures

    order: list[str] = []
    draw, bars = sidebar.draw, figures.overview_bars

    def drawing_sidebar() -> None:
        if not st.session_state.get(ui.K_SIDEBAR_DRAWN):
            order.append("sidebar")
        draw()

    def drawing_chart(*a, **k):
        order.append("first chart")
        return bars(*a, **k)

    monkeypatch.setattr(sidebar, "draw", drawing_sidebar)
    monkeypatch.setattr(figures, "overview_bars", drawing_chart)
    return order


def test_overview_draws_its_first_chart_before_the_sidebar_while_the_server_loads(
        run_dir: Path, monkeypatch: pytest.MonkeyPatch):
    order = _drawing_order(monkeypatch)
    gate = threading.Event()  # the server's load is held until the page asks for it: still under way then
    load, wait = data.load_analysis_set, preload.wait

    def held_load(*a, **k):
        assert gate.wait(60)
        return load(*a, **k)

    def page_waits(keys, timeout_s):
        gate.set()
        return wait(keys, timeout_s)

    monkeypatch.setattr(data, "load_analysis_set", held_load)
    monkeypatch.setattr(preload, "wait", page_waits)
    preload.start(preload.opening_runs([str(run_dir)]))  # as app/serve.py does
    at = _app()
    assert gate.is_set() and order == ["first chart", "sidebar"]
    assert at.sidebar.multiselect[0].value == [f"path:{run_dir.resolve()}"]  # the picker is there, after the chart
    assert at.sidebar.file_uploader and at.sidebar.text_input(key="os_server_path") is not None
    order.clear()
    at.run()  # that load has ended: the sidebar first, the same picker
    assert order == ["sidebar", "first chart"] and at.sidebar.multiselect[0].value == [f"path:{run_dir.resolve()}"]


def test_sidebar_comes_first_for_runs_the_server_did_not_load(run_dir: Path, monkeypatch: pytest.MonkeyPatch):
    order = _drawing_order(monkeypatch)
    at = _app()  # `streamlit run app/main.py` (no app/serve.py): the page loads the run itself
    assert order == ["sidebar", "first chart"]
    assert at.sidebar.multiselect[0].value == [f"path:{run_dir.resolve()}"]


def test_sidebar_is_drawn_when_the_preloaded_run_cannot_be_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from streamlit.testing.v1 import AppTest

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "rank0.json").write_text("{not json")
    monkeypatch.setenv(data.ENV_SAMPLES, str(tmp_path / "no-samples"))
    monkeypatch.setenv(data.ENV_APP_PATHS, str(bad))
    preload.start(preload.opening_runs([str(bad)])).join()
    at = AppTest.from_file(MAIN, default_timeout=300)
    at.run()
    assert not at.exception and "rank0.json" in at.error[0].value  # one line naming the file
    assert at.sidebar.multiselect[0].value == [f"path:{bad.resolve()}"] and at.sidebar.file_uploader


def test_wait_for_the_servers_load():
    fp = data.fingerprint([str(SAMPLES / "ag-gemm" / "host-sync")])
    assert preload.wait([(fp, "never started")], 5.0) is False  # not loaded here: no wait at all
    assert preload.wait([], 5.0) is False and not preload.under_way([])
    key = (fp, "under way")
    preload._ended[key] = ended = threading.Event()
    try:
        assert preload.under_way([key]) and not preload.under_way([key, (fp, "never started")])
        assert preload.wait([key], 0.05) is False  # a load still under way past the timeout
        ended.set()
        assert preload.wait([key], 0.05) is True and not preload.under_way([key])
    finally:
        del preload._ended[key]


def test_the_server_skips_streamlits_component_scan(monkeypatch: pytest.MonkeyPatch):
    from streamlit.components.v2 import manifest_scanner

    monkeypatch.setattr(manifest_scanner, "scan_component_manifests", manifest_scanner.scan_component_manifests)
    serve.skip_component_scan()
    assert manifest_scanner.scan_component_manifests() == []
    # what the scan would find could only serve a page that uses custom components: none does
    uses = re.compile(r"\bst\.components\b|streamlit\.components\b|\bcomponents\.v[12]\b")
    used = [str(p.relative_to(ROOT)) for d in ("app", "viz") for p in (ROOT / d).rglob("*.py")
            if p.name != "serve.py" and uses.search(p.read_text())]
    assert used == [], used
