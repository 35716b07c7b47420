"""In Chromium: a tooltip over every kernel at every zoom the browser makes on its own (drag-zoom, no rerun).

`overlapscope app` on the gemm-rs ring run (a run no other browser test opens, and none of the hover code was
tuned on); the Timeline opens on the whole trace, then the test drag-zooms in the browser to one step and then to
one kernel, hovers the middle of a kernel and reads its tooltip. The server is never asked (the window in the URL
and the slider stay as they were): the hover rows sent for the whole trace answer at every zoom.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .app_server import start_app
from .conftest import ROOT
from .test_app_browser import ERROR_SELECTORS, window_values

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = pytest.mark.browser
RUN = ROOT / "sample_traces" / "gemm-rs" / "ring"
# The plot's geometry and the hover rows' cells, read from the chart itself.
CELLS_JS = """() => {
  const gd = document.querySelector('[data-testid="stPlotlyChart"] .js-plotly-plot');
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, out = [];
  for (const t of gd._fullData.filter(t => t.type === 'heatmap' && t.name === 'hover')) {
    const x = Array.from(t.x), text = t.text[0], y = (t.y[0] + t.y[1]) / 2;
    for (let i = 0; i + 1 < x.length; i++) if (text[i]) out.push({x0: x[i], x1: x[i + 1], y: y, text: text[i]});
  }
  const shapes = (gd._fullLayout.shapes || []).filter(s => s.line && s.line.dash === 'dot').map(s => s.x0);
  return {cells: out, steps: shapes.sort((a, b) => a - b), xrange: xa.range.slice(), yrange: ya.range.slice(),
          dragmode: gd._fullLayout.dragmode};
}"""


@pytest.fixture()
def ring(tmp_path: Path):
    proc, url = start_app([RUN], tmp_path)
    try:
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def _to_page(area: dict, geo: dict, x: float, y: float) -> tuple[float, float]:
    (x0, x1), (y0, y1) = geo["xrange"], geo["yrange"]
    return area["x"] + area["width"] * (x - x0) / (x1 - x0), area["y"] + area["height"] * (y1 - y) / (y1 - y0)


def _drag_zoom(page, area: dict, geo: dict, lo: float, hi: float, y: float) -> None:
    """Zoom the x axis to [lo, hi] as a user does: press, drag across, release (Plotly's zoom, in the browser)."""
    (a, py), (b, _) = _to_page(area, geo, lo, y), _to_page(area, geo, hi, y)
    page.mouse.move(a, py)
    page.mouse.down()
    page.mouse.move((a + b) / 2, py + 2, steps=4)
    page.mouse.move(b, py + 2, steps=4)
    page.mouse.up()
    page.wait_for_timeout(400)


def _tooltip_at(page, area: dict, geo: dict, x: float, y: float) -> str:
    page.mouse.move(*_to_page(area, geo, x, y))
    page.wait_for_timeout(300)
    tips = page.locator(".hoverlayer .hovertext")
    return tips.first.text_content() or "" if tips.count() else ""


def test_a_kernel_answers_at_its_middle_after_zooming_in_the_browser(ring: str, browser: Browser) -> None:
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.goto(ring + "/timeline?runs=gemm-rs/ring&step=whole", wait_until="domcontentloaded")
    page.locator('[data-testid="stPlotlyChart"] .nsewdrag').first.wait_for(timeout=300_000)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')",
                           timeout=300_000)
    page.wait_for_timeout(1500)
    window, url = window_values(page), page.url
    area = page.locator('[data-testid="stPlotlyChart"] .nsewdrag').first.bounding_box()
    geo = page.evaluate(CELLS_JS)
    assert geo["dragmode"] == "zoom" and len(geo["steps"]) >= 3, geo["steps"]
    # 1. zoom in the browser to the middle step
    k = len(geo["steps"]) // 2
    lo, hi = geo["steps"][k - 1], geo["steps"][k]
    lanes = sorted({c["y"] for c in geo["cells"]})
    _drag_zoom(page, area, geo, lo, hi, lanes[len(lanes) // 2])
    geo = page.evaluate(CELLS_JS)
    assert abs(geo["xrange"][0] - lo) < 0.02 * (hi - lo) and abs(geo["xrange"][1] - hi) < 0.02 * (hi - lo)
    inside = [c for c in geo["cells"] if lo < (c["x0"] + c["x1"]) / 2 < hi]
    per_px = (geo["xrange"][1] - geo["xrange"][0]) / area["width"]
    restable = [c for c in inside if c["x1"] - c["x0"] >= 3 * per_px  # a mouse can rest on it, off the edges
                and 10 * per_px < (c["x0"] + c["x1"]) / 2 - geo["xrange"][0] < geo["xrange"][1] - 10 * per_px
                - geo["xrange"][0]]
    picked = restable[:: max(1, len(restable) // 8)][:8]
    assert len(picked) >= 4
    for c in picked:  # the middle of kernels of the step: each answers, naming what it holds
        tip = _tooltip_at(page, area, geo, (c["x0"] + c["x1"]) / 2, c["y"])
        first_line = c["text"].split("<br>")[0][:30]
        assert first_line and first_line in tip, (c, tip)
    # 2. zoom in the browser to one kernel: the longest one-kernel cell of the step, spread across the plot
    single = max((c for c in inside if "under a pixel" not in c["text"]), key=lambda c: c["x1"] - c["x0"])
    pad = 0.1 * (single["x1"] - single["x0"])
    _drag_zoom(page, area, geo, single["x0"] - pad, single["x1"] + pad, single["y"])
    geo = page.evaluate(CELLS_JS)
    assert geo["xrange"][1] - geo["xrange"][0] < 1.5 * (single["x1"] - single["x0"])
    for q in (0.2, 0.5, 0.8):  # anywhere along it, its middle too: far from any point of the figure
        tip = _tooltip_at(page, area, geo, single["x0"] + q * (single["x1"] - single["x0"]), single["y"])
        name = single["text"].split("<br>")[0]
        assert name[:30] in tip and "ms long" in tip, (single, tip)
    # all of it in the browser: the server was not asked, the window and the link are as they were
    assert window_values(page) == window and page.url == url
    for sel in ERROR_SELECTORS:
        assert page.locator(sel).count() == 0, page.locator(sel).first.inner_text()
