"""The exported HTML report in a real headless Chromium with the network blocked: it must open
from the file alone (Plotly embedded), draw the timeline's WebGL canvas with compute and
communication colours, and show the findings. Debian's chromium, driven by Playwright through
executable_path as in tests/test_app_browser.py; a screenshot goes to test-artifacts/."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser

from analyzers.io.load import load_traces
from analyzers.report import analyze
from viz.export_html import report_html

from .conftest import SAMPLES
from .test_app_browser import ARTIFACTS, ERROR_SELECTORS, count_colour, served  # noqa: F401

pytestmark = pytest.mark.browser


def open_offline(browser: Browser, html_path):
    """Open a local file in a context of its own with every non-file request aborted: (page, requests, errors)."""
    context = browser.new_context(offline=True, viewport={"width": 1700, "height": 1000})
    blocked: list[str] = []

    def route(r):
        if r.request.url.startswith("file:"):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(html_path.as_uri())
    return page, blocked, errors


def test_html_report_opens_offline_and_shows_timeline_and_findings(tmp_path, browser: Browser):
    ts = load_traces([str(SAMPLES / "ag-gemm" / "host-sync")])
    report = analyze(ts)
    assert report.findings
    out = tmp_path / "report.html"
    out.write_text(report_html(ts, report), encoding="utf-8")
    page, blocked, errors = open_offline(browser, out)
    try:
        page.wait_for_selector("#timeline canvas", state="attached", timeout=60_000)
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= 3",
                               timeout=60_000)
        page.wait_for_timeout(1000)
        text = page.inner_text("body")
        for f in report.findings:
            assert f.title in text and f.fix in text
        assert "Per iteration" in text and "Cross-rank" in text
        shot = page.locator("#timeline").screenshot()
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "export_report.png"), full_page=True)
        assert count_colour(shot, (0x1F, 0x77, 0xB4)) > 200  # compute drawn
        assert count_colour(shot, (0xFF, 0x7F, 0x0E)) > 50  # communication drawn
        assert blocked == [] and errors == []
    finally:
        page.context.close()


def test_app_timeline_offers_the_three_downloads(served: str, tmp_path, browser: Browser) -> None:  # noqa: F811
    """The Timeline page's download buttons give a valid Perfetto trace, an HTML report and a PNG."""
    import gzip
    import json

    from .test_export import validate

    page = browser.new_page(viewport={"width": 1500, "height": 1100}, accept_downloads=True)
    page.goto(served + "/timeline", wait_until="domcontentloaded")
    page.locator('[data-testid="stPlotlyChart"] canvas').first.wait_for(state="attached", timeout=90_000)
    page.get_by_text("Download: Perfetto trace, HTML report, PNG").click()
    got = {}
    for label, name in (("Perfetto trace", "perfetto"), ("HTML report", "html"), ("Timeline as shown", "png")):
        with page.expect_download(timeout=120_000) as dl:
            page.get_by_role("button", name=label).first.click()
        got[name] = tmp_path / dl.value.suggested_filename
        dl.value.save_as(got[name])
    validate(json.loads(gzip.decompress(got["perfetto"].read_bytes())))
    text = got["html"].read_text()
    assert "<h2>Findings" in text and "Plotly.newPlot" in text and 'src="http' not in text
    assert got["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for sel in ERROR_SELECTORS:
        assert page.locator(sel).count() == 0, page.locator(sel).first.inner_text()
