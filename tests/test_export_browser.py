"""The exported HTML report in a real headless Chromium with the network blocked: it must open
from the file alone (Plotly embedded), draw the timeline's WebGL canvas with compute and
communication colours, and show the findings. Debian's chromium, driven by Playwright through
executable_path as in tests/test_app_browser.py; a screenshot goes to test-artifacts/."""

from __future__ import annotations

from playwright.sync_api import sync_playwright

from analyzers.load import load_traces
from analyzers.report import analyze
from overlapscope.export_html import report_html

from .conftest import SAMPLES
from .test_app_browser import ARTIFACTS, count_colour, launch_browser


def open_offline(html_path):
    """Open a local file with every non-file request aborted; returns (page, requests, errors, closers)."""
    p = sync_playwright().start()
    browser = launch_browser(p)
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
    return page, blocked, errors, (context, browser, p)


def test_html_report_opens_offline_and_shows_timeline_and_findings(tmp_path):
    ts = load_traces([str(SAMPLES / "ag-gemm" / "host-sync")])
    report = analyze(ts)
    assert report.findings
    out = tmp_path / "report.html"
    out.write_text(report_html(ts, report), encoding="utf-8")
    page, blocked, errors, closers = open_offline(out)
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
        for c in closers[:2]:
            c.close()
        closers[2].stop()
