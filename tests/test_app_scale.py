"""The app on a run of many ranks: distributions on the Overview, the Stragglers page (heatmap, picker),
and a Timeline that draws the picked ranks (default: slowest, median, fastest), not every rank."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from app import data
from app.ranks import default_ranks
from viz import labels

from .conftest import SAMPLES

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
N_RANKS = 20


@pytest.fixture(scope="module")
def many_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sample root with one run: the 2-rank ag-gemm host-sync sample copied to 20 ranks."""
    root = tmp_path_factory.mktemp("many")
    run = root / "demo" / "many"
    run.mkdir(parents=True)
    src = sorted((SAMPLES / "ag-gemm" / "host-sync").glob("rank*.json.gz"))
    docs = [json.loads(gzip.decompress(p.read_bytes())) for p in src]
    for r in range(N_RANKS):
        doc = dict(docs[r % 2])
        doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": r, "world_size": N_RANKS}
        (run / f"rank{r}.json").write_text(json.dumps(doc))
    (run / "manifest.json").write_text(json.dumps({"status": "ok", "algorithm": "demo", "variant": "many",
                                                   "world_size": N_RANKS}))
    return root


@pytest.fixture()
def many_env(many_root: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv(data.ENV_SAMPLES, str(many_root))
    monkeypatch.delenv(data.ENV_ALLOWED_ROOTS, raising=False)
    monkeypatch.delenv(data.ENV_APP_PATHS, raising=False)
    monkeypatch.setenv(data.ENV_RUNS_DIR, str(tmp_path / "runs"))
    return many_root


def _app():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(MAIN, default_timeout=300)
    at.run()
    return at


def _ok(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _charts(at) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


@pytest.fixture(scope="module")
def many_report(many_root: Path):
    """The 20-rank run analyzed once for the module (the tests only read it)."""
    from analyzers.io.load import load_traces
    from analyzers.report import analyze

    return analyze(load_traces([many_root / "demo" / "many"]))


def test_default_ranks_are_slowest_median_fastest(many_report):
    rep = many_report
    by_span = sorted(rep.ranks, key=lambda m: (m.whole.span_ns, m.rank))
    picks = default_ranks(rep)
    assert picks == sorted({by_span[0].rank, by_span[len(by_span) // 2].rank, by_span[-1].rank})
    assert len(picks) <= 3


def test_overview_shows_distributions(many_env: Path):
    at = _app()
    _ok(at)
    kinds = [t["type"] for f in _charts(at) for t in f["data"]]
    assert kinds.count("histogram") == 3  # overlap ratio, exposed comm, span across the 20 ranks
    bars = [t for f in _charts(at) for t in f["data"] if t["type"] == "bar"]
    assert all(len(t["y"]) <= 3 for t in bars)  # no bar per rank: the critical path only of the Timeline's 3 ranks
    assert len(at.dataframe[1].value) == N_RANKS  # the table still lists every rank (after the decision table)


def test_stragglers_page_heatmap_and_picker_to_timeline(many_env: Path):
    at = _app()
    at.switch_page("views/stragglers.py").run()
    _ok(at)
    heat = [f for f in _charts(at) if f["data"] and f["data"][0]["type"] == "heatmap"]
    assert heat
    table = at.dataframe[-1].value
    assert len(table) == N_RANKS and {labels.header(k) for k in ("z", "n_last", "before_mostly")} <= set(table.columns)
    # no row selected: the button sends the top 3 rows' ranks to the Timeline
    at.button[0].click().run()
    _ok(at)
    top3 = sorted(int(r) for r in table["rank"].head(3))
    assert at.session_state["os_tl_ranks"]["sample:demo/many"] == top3
    at.switch_page("views/timeline.py").run()
    _ok(at)
    ticks = _charts(at)[0]["layout"]["yaxis"]["ticktext"]
    drawn = sorted({int(t.split(" ")[1]) for t in ticks})
    assert drawn == top3
    assert at.multiselect[0].value == top3


def test_timeline_draws_default_ranks_only(many_env: Path):
    at = _app()
    at.switch_page("views/timeline.py").run()
    _ok(at)
    ticks = _charts(at)[0]["layout"]["yaxis"]["ticktext"]
    drawn = {int(t.split(" ")[1]) for t in ticks}
    assert 1 <= len(drawn) <= 3 and set(at.multiselect[0].value) == drawn
    assert len(at.dataframe[0].value) == len(drawn)  # window metrics of the drawn ranks


def test_crossrank_and_syncs_draw_the_timelines_ranks(many_env: Path, many_report):
    picks = default_ranks(many_report)
    at = _app()
    at.switch_page("views/crossrank.py").run()
    _ok(at)
    heat, bars = _charts(at)[:2]
    drawn = sorted(int(y.split(" ")[1]) for y in heat["data"][0]["y"])
    assert drawn == picks  # the Timeline's default ranks (slowest, median, fastest), not a row per rank
    assert sorted({int(y.split(" ")[1]) for t in bars["data"] for y in t["y"]}) == drawn
    assert heat["layout"]["height"] < 400 and bars["layout"]["height"] < 400
    assert any(len(d.value) == N_RANKS for d in at.dataframe)  # the peer-wait table lists every rank
    assert any("of 20: the Timeline's ranks" in c.value for c in at.caption)
    at.switch_page("views/syncs.py").run()
    _ok(at)
    fig = _charts(at)[0]
    synced = {int(r) for t in fig["data"] for r in _values(t["y"])}
    assert synced and synced <= set(drawn)  # the host-sync sample syncs on every rank: the drawn ones only
    assert {int(r) for r in at.dataframe[0].value[labels.header("rank")]} == synced
    assert any(f"of {N_RANKS} (the Timeline's ranks" in c.value for c in at.caption)


def _values(y) -> list:
    """A Plotly array as sent (a list, or a typed array {dtype, bdata})."""
    if isinstance(y, dict):
        import base64

        import numpy as np

        return np.frombuffer(base64.b64decode(y["bdata"]), dtype=np.dtype(y["dtype"])).tolist()
    return list(y)


def test_diff_draws_the_timelines_ranks(many_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Two runs of 20 ranks (the sample and a copy given on the command line): both timelines of the Diff page
    draw the Timeline's ranks of each run, not 20 lanes each."""
    from analyzers.io.load import load_traces
    from analyzers.report import analyze

    copy = tmp_path / "copy"
    copy.mkdir()
    for f in (many_env / "demo" / "many").iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    monkeypatch.setenv(data.ENV_APP_PATHS, str(copy))
    picks = default_ranks(analyze(load_traces([many_env / "demo" / "many"])))
    at = _app()
    at.switch_page("views/diff.py").run()
    _ok(at)
    ticks = _charts(at)[-1]["layout"]["yaxis"]["ticktext"]
    drawn = {int(t.split(" ")[1]) for t in ticks}
    assert drawn == set(picks)  # the same files: the same default ranks on both sides
    assert sum(f"of {N_RANKS} (the Timeline's ranks" in c.value for c in at.caption) == 2
