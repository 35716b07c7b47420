"""Every table on every app page reads in its users' language: column headers are labels, not the
data model's identifiers (snake_case), and no cell shows None, nan or a -1 sentinel.

The pages run under Streamlit's AppTest on the test samples of tests/test_app.py (a Kineto pair with
NCCL send/recv, an Nsight Systems export with blocking host syncs) and on bundled sample runs with
findings, blocking syncs and cross-rank order mismatches.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from app import data, ui

from .conftest import ROOT
from .test_app import MAIN, TIMEOUT, app_env, samples  # noqa: F401  (fixtures)

PAGES = tuple(ui.PAGE_FILES)  # the app's own page registry: a page added there is checked here
IDENTIFIER = re.compile(r"^[a-z0-9]+(_[a-z0-9]+)+$")  # overlap_ratio, gpu_idle_ms, n_collectives
SHOWN_AS_MISSING = {"none", "nan", "<na>", "nat", "-1", "null"}


def problems(frame: pd.DataFrame, where: str) -> list[str]:
    """What a reader would trip over in one table: raw identifiers as headers, None / nan / -1 cells."""
    found = [f"{where}: header {c!r}" for c in frame.columns if IDENTIFIER.match(str(c))]
    for c in frame.columns:
        for v in frame[c].tolist():
            bad = (v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is pd.NaT
                   or (isinstance(v, (int, float)) and not isinstance(v, bool) and v == -1)
                   or (isinstance(v, str) and v.strip().lower() in SHOWN_AS_MISSING))
            if bad:
                found.append(f"{where}: column {c!r} shows {v!r}")
                break
    return found


def test_the_checker_sees_each_kind_of_problem():
    bad = pd.DataFrame({"sync_op": ["a"], "step": [-1], "GPU idle (ms)": [None], "x": ["nan"], "ok": ["1.0 ms"]})
    assert problems(bad, "t") == ["t: header 'sync_op'", "t: column 'step' shows -1",
                                  "t: column 'GPU idle (ms)' shows None", "t: column 'x' shows 'nan'"]
    assert problems(pd.DataFrame({"rank": [0, 1], "overlap ratio": ["51.1%", "n/a"], "step": ["—", "3"]}), "t") == []


def test_the_registry_lists_every_page_file() -> None:
    """A page file under app/views/ that the registry misses would escape the table checks below."""
    views = ROOT / "app" / "views"
    on_disk = {f"views/{p.name}" for p in views.glob("*.py") if p.name != "__init__.py"}
    assert on_disk == set(ui.PAGE_FILES.values())
    assert PAGES[0] == "overview"  # the checks start on the page the app opens on


def test_the_docs_picture_every_page() -> None:
    """docs/app.md shows a screenshot of each registered page (docs/take_screenshots.py writes them)."""
    text = (ROOT / "docs" / "app.md").read_text(encoding="utf-8")
    for page in PAGES:
        assert f"(screenshots/{page}.png)" in text, page
        assert (ROOT / "docs" / "screenshots" / f"{page}.png").stat().st_size > 10_000, page


def _all_tables(at, page: str) -> list[str]:
    out = []
    for i, el in enumerate(at.dataframe):
        out += problems(el.value, f"{page} dataframe {i}")
    for i, el in enumerate(at.table):
        out += problems(el.value, f"{page} table {i}")
    return out


def _every_page(at) -> tuple[list[str], int]:
    found, n = [], 0
    for page in PAGES:
        if page != "overview":
            at.switch_page(ui.PAGE_FILES[page]).run()
        assert not at.exception, [e.value for e in at.exception]
        assert not at.error, [e.value for e in at.error]
        n += len(at.dataframe) + len(at.table)
        found += _all_tables(at, page)
    return found, n


def test_every_table_on_the_test_samples(app_env: Path) -> None:  # noqa: F811
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT)
    at.run()
    found, n = _every_page(at)
    assert n >= 8, "the pages show their tables"
    assert not found, found


@pytest.mark.parametrize("runs", ["ag-gemm/host-sync,ag-gemm/tuned", "symm-mem/two-stream,fsdp/front-loaded"])
def test_every_table_on_sample_runs(runs: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv(data.ENV_SAMPLES, str(ROOT / "sample_traces"))
    monkeypatch.delenv(data.ENV_APP_PATHS, raising=False)
    monkeypatch.setenv(data.ENV_RUNS_DIR, str(tmp_path / "runs"))
    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT)
    at.query_params["runs"] = runs
    at.run()
    assert len(at.session_state["os_selected"]) == 2
    found, n = _every_page(at)
    assert n >= 8
    assert not found, found
