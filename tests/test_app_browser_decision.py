"""In Chromium, as a new user: five runs on the command line, the decision on the first screen, every run selected,
the view in the URL, and a tooltip wherever the mouse rests on a kernel lane of the Timeline.

`overlapscope app` on the five ag-gemm sample variants (the runs the dashboard was reviewed on, not the test
samples the other browser tests use); Debian's chromium through Playwright (tests/test_app_browser.py).
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

import pytest

from .app_server import start_app
from .conftest import ROOT
from .test_app_browser import ERROR_SELECTORS

if TYPE_CHECKING:
    from playwright.sync_api import Browser

VARIANTS = ("baseline", "sync-in-loop", "sync-before-loop", "host-sync", "tuned")
# Where kernels are: the middles of the hover rows' cells (each an activity, or a run of sub-pixel ones) that a
# mouse can rest on (3 px wide or more, not on the plot's edge), 5 per lane on 2 lanes, spread out, as fractions
# of the plot area.
SPOTS_JS = """() => {
  const gd = document.querySelector('[data-testid="stPlotlyChart"] .js-plotly-plot');
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, out = [];
  const px = (v) => (v - xa.range[0]) / (xa.range[1] - xa.range[0]) * xa._length;
  const rows = gd._fullData.filter(t => t.type === 'heatmap' && t.name === 'hover').slice(-2);
  for (const h of rows) {
    const x = Array.from(h.x), mids = [];
    for (let i = 0; i + 1 < x.length; i++) {
      const mid = px((x[i] + x[i + 1]) / 2);
      if (h.text[0][i] && px(x[i + 1]) - px(x[i]) >= 3 && mid > 10 && mid < xa._length - 10)
        mids.push((x[i] + x[i + 1]) / 2);
    }
    const y = (h.y[0] + h.y[1]) / 2;
    for (const q of [0.1, 0.3, 0.5, 0.7, 0.9]) out.push([mids[Math.floor(q * (mids.length - 1))], y]);
  }
  return out.map(([x, y]) => [(x - xa.range[0]) / (xa.range[1] - xa.range[0]),
                              (ya.range[1] - y) / (ya.range[1] - ya.range[0])]);
}"""


@pytest.fixture(scope="module")
def five(tmp_path_factory: pytest.TempPathFactory):
    """One server for the module; each test opens a browser session of its own on it."""
    proc, url = start_app([ROOT / "sample_traces" / "ag-gemm" / v for v in VARIANTS], tmp_path_factory.mktemp("five"))
    try:
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_first_screen_is_the_decision_and_the_view_is_in_the_url(five: str, browser: Browser) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(five + "/", wait_until="domcontentloaded")
    headline = page.locator('[data-testid="stAlertContentSuccess"]', has_text="Fastest")
    headline.wait_for(timeout=300_000)
    box = headline.bounding_box()
    assert box is not None and box["y"] + box["height"] < 900, "the decision is on the first screen"
    # the ranking table right under the headline (it mounts a moment after it)
    page.wait_for_function("h => [...document.querySelectorAll('[data-testid=\"stDataFrame\"]')]"
                           ".some(e => e.getBoundingClientRect().top < h)", arg=900 * 1.5, timeout=60_000)
    chips = page.locator('[data-testid="stSidebar"] [data-testid="stMultiSelectTagsContainer"] [data-tag]')
    chips.first.wait_for(timeout=120_000)
    page.wait_for_timeout(500)
    assert chips.count() == len(VARIANTS), "every run given is selected"
    page.wait_for_function("() => location.search.includes('runs=')", timeout=60_000)
    assert all(v in page.url for v in VARIANTS)
    for sel in ERROR_SELECTORS:
        assert page.locator(sel).count() == 0, page.locator(sel).first.inner_text()


def test_timeline_tooltip_wherever_the_mouse_rests(five: str, browser: Browser) -> None:
    # the whole trace, then a 0.1 ms window of one step (the zoom a box selection makes)
    for query in ("runs=ag-gemm/tuned&step=whole", "runs=ag-gemm/tuned&step=1&window=1.0~1.1"):
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.goto(five + "/timeline?" + query, wait_until="domcontentloaded")
        page.locator('[data-testid="stPlotlyChart"] .nsewdrag').first.wait_for(timeout=300_000)
        page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')",
                               timeout=300_000)
        page.wait_for_timeout(1500)
        area = page.locator('[data-testid="stPlotlyChart"] .nsewdrag').first.bounding_box()
        spots = page.evaluate(SPOTS_JS)
        assert len(spots) >= 5, "the hover layer is in the figure"
        missed = []
        for fx, fy in spots:
            page.mouse.move(area["x"] + area["width"] * fx, area["y"] + area["height"] * fy)
            page.wait_for_timeout(250)
            if page.locator(".hoverlayer .hovertext").count() == 0:
                missed.append((query, round(fx, 4), round(fy, 4)))
        assert not missed, f"no tooltip at {len(missed)} of {len(spots)} places on the kernel lanes: {missed}"
        page.close()
