"""In Chromium, as a new user: five runs on the command line, the decision on the first screen, every run selected,
the view in the URL, and a tooltip wherever the mouse rests on a kernel lane of the Timeline.

`overlapscope app` on the five ag-gemm sample variants (the runs the dashboard was reviewed on, not the test
samples the other browser tests use); Debian's chromium through Playwright (tests/test_app_browser.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from app import data

from .conftest import ROOT
from .test_app_browser import ERROR_SELECTORS, free_port, launch_browser

VARIANTS = ("baseline", "sync-in-loop", "sync-before-loop", "host-sync", "tuned")


@pytest.fixture()
def five(tmp_path: Path):
    env = dict(os.environ)
    env.update({data.ENV_RUNS_DIR: str(tmp_path / "runs"), "OVERLAPSCOPE_CACHE_DIR": str(tmp_path / "cache"),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))})
    for var in (data.ENV_ALLOWED_ROOTS, data.ENV_APP_PATHS, data.ENV_SAMPLES):
        env.pop(var, None)
    port = free_port()
    paths = [str(ROOT / "sample_traces" / "ag-gemm" / v) for v in VARIANTS]
    log = (tmp_path / "app.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "overlapscope", "app", *paths, "--port", str(port)], cwd=ROOT,
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "app.log").read_text()[-2000:]
            time.sleep(0.3)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_first_screen_is_the_decision_and_the_view_is_in_the_url(five: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_browser(p)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(five + "/", wait_until="domcontentloaded")
            headline = page.locator('[data-testid="stAlertContentSuccess"]', has_text="Fastest")
            headline.wait_for(timeout=300_000)
            box = headline.bounding_box()
            assert box is not None and box["y"] + box["height"] < 900, "the decision is on the first screen"
            table = page.locator('[data-testid="stDataFrame"]').first
            assert table.bounding_box()["y"] < 900 * 1.5
            chips = page.locator('[data-testid="stSidebar"] [data-baseweb="tag"]')
            assert chips.count() == len(VARIANTS), "every run given is selected"
            page.wait_for_function("() => location.search.includes('runs=')", timeout=60_000)
            assert all(v in page.url for v in VARIANTS)
            for sel in ERROR_SELECTORS:
                assert page.locator(sel).count() == 0, page.locator(sel).first.inner_text()
        finally:
            browser.close()


def test_timeline_tooltip_wherever_the_mouse_rests(five: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_browser(p)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1000})
            page.goto(five + "/timeline?runs=ag-gemm/tuned&step=whole", wait_until="domcontentloaded")
            page.locator('[data-testid="stPlotlyChart"] .nsewdrag').first.wait_for(timeout=300_000)
            page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')",
                                   timeout=300_000)
            page.wait_for_timeout(1500)
            area = page.locator('[data-testid="stPlotlyChart"] .nsewdrag').first.bounding_box()
            lanes = page.evaluate("() => { const gd = document.querySelector('[data-testid=\"stPlotlyChart\"] "
                                  ".js-plotly-plot'); const h = gd._fullData.find(t => t.name === 'hover');"
                                  " return [...new Set(Array.from(h.y))]; }")
            assert lanes, "the hover layer is in the figure"
            y_axis = page.evaluate("() => { const ax = document.querySelector('[data-testid=\"stPlotlyChart\"] "
                                   ".js-plotly-plot')._fullLayout.yaxis; return [ax.range[0], ax.range[1]]; }")
            hits, tries = 0, 0
            for lane in lanes[:2]:
                frac_y = (y_axis[1] - lane) / (y_axis[1] - y_axis[0])
                for fx in (0.15, 0.35, 0.5, 0.65, 0.85):
                    page.mouse.move(area["x"] + area["width"] * fx, area["y"] + area["height"] * frac_y)
                    page.wait_for_timeout(250)
                    tries += 1
                    hits += page.locator(".hoverlayer .hovertext").count() > 0
            assert hits == tries, f"a tooltip at {hits} of {tries} places along the kernel lanes"
        finally:
            browser.close()
