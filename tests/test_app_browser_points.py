"""In Chromium, the dashboard's review points on runs no other test was written against: four gemm-rs variants
given to `overlapscope app` (the other browser tests open the ag-gemm variants or the test samples).

One server for the module; each test opens its own browser session. What each test checks is what a new user saw
go wrong: the fastest run named by its best timing on the first screen with nothing dropped; the harmless closing
syncs shown and counted as harmless; numbers in words with one unit; every series of a chart distinct; the Diff
box's colour following its own words; red heatmap columns only where peers waited; and the command stopping its
whole process group. Tooltips at every zoom are tests/test_app_browser_hover.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import expect

from analyzers.io.load import load_traces
from analyzers.report import analyze

from .app_server import app_answers, start_app
from .conftest import ROOT
from .test_app_browser import ERROR_SELECTORS
from .test_app_stop import _children
from .test_app_words import RAW

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = pytest.mark.browser
FOLDER = ROOT / "sample_traces" / "gemm-rs"
VARIANTS = ("baseline", "collective-pipelined", "ring", "tuned")
LABELS = [f"gemm-rs/{v}" for v in VARIANTS]
PAGES = ("", "timeline", "crossrank", "stragglers", "syncs", "collectives", "diff", "run")
IDLE_JS = "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"
DRAWN_JS = ("() => { const g = document.querySelector('[data-testid=\"stPlotlyChart\"] .js-plotly-plot');"
            " return !!(g && g._fullData && g._fullData.length) && !document.querySelector("
            "'[data-testid=\"stStatusWidget\"]'); }")
CHART_JS = """(i) => { const gd = document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot')[i];
  return gd ? gd._fullData.map(t => ({type: t.type, name: t.name, x: t.x ? Array.from(t.x) : null,
    y: t.y ? Array.from(t.y) : null, dash: t.line ? t.line.dash : null, symbol: t.marker ? t.marker.symbol : null,
    colorbar: t.colorbar && t.colorbar.title ? t.colorbar.title.text : null, showlegend: t.showlegend})) : null; }"""


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory):
    proc, url = start_app([FOLDER / v for v in VARIANTS], tmp_path_factory.mktemp("four"))
    try:
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def _open(browser, url: str, wait_for: str = IDLE_JS):
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.goto(url, wait_until="domcontentloaded")
    page.locator("h1").first.wait_for(timeout=300_000)
    page.wait_for_function(wait_for, timeout=300_000)
    page.wait_for_timeout(1200)
    for sel in ERROR_SELECTORS:
        assert page.locator(sel).count() == 0, (url, page.locator(sel).first.inner_text())
    return page


def test_first_screen_names_the_fastest_by_its_best_timing_and_drops_no_run(four: str, browser: Browser) -> None:
    timed = {f"gemm-rs/{v}": json.loads((FOLDER / v / "manifest.json").read_text())["timings_ms"]["variant_ms"]
             for v in VARIANTS}
    fastest = min(timed, key=timed.get)
    page = _open(browser, four + "/", "() => [...document.querySelectorAll('[data-testid=\"stAlertContent"
                                      "Success\"]')].some(e => e.innerText.startsWith('Fastest'))")
    head = page.locator('[data-testid="stAlertContentSuccess"]', has_text="Fastest").first
    text = head.inner_text()
    assert text.startswith(f"Fastest: {fastest}, {timed[fastest]:.3f} ms"), (text, timed)
    box = head.bounding_box()
    assert box["y"] + box["height"] < 1000, "the decision is on the first screen"
    chips = page.locator('[data-testid="stSidebar"] [data-testid="stMultiSelectTagsContainer"] [data-tag]')
    # the Overview draws before the sidebar (tests/test_app_startup.py): wait for the sidebar's chips to settle
    expect(chips, "every run given is selected").to_have_count(len(VARIANTS), timeout=120_000)
    page.wait_for_function("() => location.search.includes('runs=')", timeout=60_000)
    assert all(label in urllib.request.unquote(page.url) for label in LABELS)


def test_every_page_in_words_with_one_unit(four: str, browser: Browser) -> None:
    found = []
    for path in PAGES:
        page = _open(browser, f"{four}/{path}?runs={','.join(LABELS[:2])}")
        texts = page.evaluate("() => [document.querySelector('[data-testid=\"stMain\"]').innerText,"
                              " ...[...document.querySelectorAll('svg text')].map(t => t.textContent)]")
        for text in texts:
            found += [f"/{path}: {why}: {text[:100]!r}" for rx, why in RAW if rx.search(text)]
            if re.fullmatch(r"[\d.]+[kMGT]?B", text.strip()):  # Plotly's "1B" is 10^9; bytes read "1 GB"
                found.append(f"/{path}: a tick in Plotly's SI letters: {text!r}")
            found += [f"/{path}: a raw metric key: {m!r}" for m in re.findall(r"\b[a-z]+_[a-z_]*_ns\b", text)]
        page.close()
    assert not found, found


def test_harmless_syncs_drawn_and_counted_as_harmless_and_every_series_distinct(four: str, browser: Browser) -> None:
    page = _open(browser, f"{four}/timeline?runs=gemm-rs/tuned&step=whole", DRAWN_JS)
    names = {t["name"] for t in page.evaluate(CHART_JS, 0) if t["showlegend"] is not False}
    # the closing cudaDeviceSynchronize of each rank idled nothing: drawn as harmless, never as the bug
    assert "host sync, no GPU idle (harmless)" in names and "blocking host sync (GPU idled)" not in names
    page.close()
    page = _open(browser, f"{four}/syncs?runs=gemm-rs/tuned")
    for label in ("Syncs that idled the GPU", "Harmless syncs (no GPU idle)", "Host blocked in them"):  # drawn
        page.locator('[data-testid="stMetricLabel"]', has_text=label).first.wait_for(timeout=120_000)
    metrics = dict(zip(page.locator('[data-testid="stMetricLabel"]').all_inner_texts(),
                       page.locator('[data-testid="stMetricValue"]').all_inner_texts(), strict=True))
    assert metrics["Syncs that idled the GPU"] == "0" and metrics["Harmless syncs (no GPU idle)"] == "2"
    assert metrics["Host blocked in them"] == "0.000 ms", metrics
    page.close()
    # the Overview's per-iteration chart: one line per run and rank, none drawn over another
    page = _open(browser, f"{four}/?runs={','.join(LABELS)}", "() => document.querySelectorAll("
                          "'[data-testid=\"stPlotlyChart\"] .js-plotly-plot').length >= 2")
    page.wait_for_function(IDLE_JS, timeout=300_000)
    charts = [page.evaluate(CHART_JS, i) for i in range(page.locator('[data-testid="stPlotlyChart"]'
                                                                     ' .js-plotly-plot').count())]
    lines = next(c for c in charts if c and len(c) == 2 * len(VARIANTS)
                 and all(t["type"] == "scatter" for t in c))
    points = [tuple(zip(t["x"], t["y"], strict=True)) for t in lines]
    assert len(set(points)) == len(points), "two series drawn on the same points"
    assert len({(t["dash"], t["symbol"]) for t in lines}) == len(lines)


def test_diff_box_colour_follows_its_words(four: str, browser: Browser) -> None:
    tones = {"stAlertContentSuccess": "better", "stAlertContentWarning": "worse", "stAlertContentInfo": "same"}
    for a, b in ((LABELS[0], LABELS[3]), (LABELS[3], LABELS[0]), (LABELS[1], LABELS[2])):
        page = _open(browser, f"{four}/diff?runs={a},{b}")
        box = page.locator('[data-testid^="stAlertContent"]', has_text="Verdict:").first
        tone = tones[box.get_attribute("data-testid")]
        words = box.inner_text()
        faster = re.search(r"(\S+) (?:hides [^;]*? and )?is [\d.]+% faster", words)
        if "within the iteration spread" in words or faster is None:
            want = "same"
        else:
            want = "better" if faster.group(1) == b else "worse"
        assert tone == want, (a, b, words, tone)
        for arrow in re.findall(r"overlap ([\d.]+)% -> ([\d.]+)%", words):  # B's gain reads forward
            assert float(arrow[1]) > float(arrow[0]), words
        page.close()


def test_red_heatmap_columns_only_where_peers_waited(four: str, browser: Browser) -> None:
    rep = analyze(load_traces(sorted((FOLDER / "ring").glob("rank*.json*")), label="ring"))
    colls = rep.cross_rank.collectives
    waited = {f"#{int(c)} {n}" for c, n, w in zip(colls["coll_id"], colls["coll_name"], colls["max_wait_ns"],
                                                  strict=True) if (w or 0) > 0}
    assert waited, "peers waited somewhere"
    page = _open(browser, f"{four}/crossrank?runs=gemm-rs/ring", DRAWN_JS)
    n = page.locator('[data-testid="stPlotlyChart"] .js-plotly-plot').count()
    heat = next(t for t in (page.evaluate(CHART_JS, i) for i in range(n))
                if t and any(x["type"] == "heatmap" for x in t))
    seen = set()
    for t in heat:
        is_red = "late, peers waited" in (t["colorbar"] or "")
        seen |= set(t["x"])
        assert all((x in waited) == is_red for x in t["x"]), (t["colorbar"], t["x"][:5])
    assert waited <= seen


def test_stopping_the_command_stops_every_process_of_the_server(tmp_path: Path, browser: Browser) -> None:
    proc, url = start_app([FOLDER / "tuned"], tmp_path)
    port = int(url.rsplit(":", 1)[1])
    try:
        _open(browser, url + "/").context.close()  # a browser session on the server, as a user has
        server = _children(proc.pid)  # app/serve.py, the leader of the server's process group
        assert server and all(os.getpgid(pid) == pid for pid in server)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 15
        while app_answers(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not app_answers(port), "something still serves the port"
        for pid in server:  # no process of the group is left
            with pytest.raises(ProcessLookupError):
                os.killpg(pid, 0)
    finally:
        if proc.poll() is None:
            proc.kill()
