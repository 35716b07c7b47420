"""End to end: the real app in a real headless Chromium (Debian's chromium package driven by
Playwright through executable_path; never a downloaded browser).

Starts `streamlit run app/main.py` on a free port with the test samples, opens the Timeline,
waits for the chart's WebGL canvas, checks no error element is on the page and that the
timeline actually drew (compute blue and communication orange pixels), and saves a screenshot
to test-artifacts/. CI installs chromium with apt-get; without it these tests do not run and the session
fails with one line saying what to install (tests/conftest.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from app import data

from .conftest import ROOT, launch_chromium
from .test_app import make_samples

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = pytest.mark.browser
ARTIFACTS = ROOT / "test-artifacts"
ERROR_SELECTORS = ('[data-testid="stException"]', '[data-testid="stAlertContentError"]')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_app(port: int, env: dict[str, str], log: Path, paths: list[str] | None = None) -> subprocess.Popen:
    """`streamlit run app/main.py` headless on 127.0.0.1:port; returns once /_stcore/health answers."""
    cmd = [sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "main.py"), "--server.headless", "true",
           "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none", "--", *(paths or [])]
    return launch_until_healthy(cmd, port, env, log)


def launch_until_healthy(cmd: list[str], port: int, env: dict[str, str], log: Path,
                         timeout_s: float = 90) -> subprocess.Popen:
    """Start a streamlit command line; return once /_stcore/health on 127.0.0.1:port answers."""
    fh = log.open("w")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited ({proc.returncode}):\n{log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.3)
    proc.terminate()
    raise RuntimeError(f"streamlit did not come up on port {port}:\n{log.read_text()[-2000:]}")


def stop_app(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def launch_browser(p):
    """Debian's chromium for the scripts in benchmarks/ and docs/; the tests share one (conftest's `browser`)."""
    return launch_chromium(p)


def window_values(page) -> list[str]:
    """The Timeline's time-window slider thumbs (ms from the step start)."""
    return page.evaluate("() => [...document.querySelectorAll('[data-testid=\"stSlider\"] input[type=\"range\"]')]"
                         ".map(e => e.value)")


def count_colour(png: bytes, rgb: tuple[int, int, int], tol: int = 12) -> int:
    """Pixels within tol of a colour (the timeline's compute / communication colours)."""
    import io

    import numpy as np
    from PIL import Image

    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    return int((np.abs(img - np.array(rgb)).max(axis=2) <= tol).sum())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, hta_dir: Path):
    """One server per module: each test opens its own browser on it (a new Streamlit session)."""
    tmp_path = tmp_path_factory.mktemp("served")
    samples = make_samples(tmp_path / "samples")
    env = dict(os.environ)
    env.update({data.ENV_SAMPLES: str(samples), data.ENV_RUNS_DIR: str(tmp_path / "runs"),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))})
    env.pop(data.ENV_ALLOWED_ROOTS, None)
    env.pop(data.ENV_APP_PATHS, None)
    port = free_port()
    proc = start_app(port, env, tmp_path / "streamlit.log")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_app(proc)


def test_timeline_draws_in_chromium(served: str, browser: Browser) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    console_errors: list[str] = []
    page.on("pageerror", lambda exc: console_errors.append(str(exc)))
    page.goto(served + "/", wait_until="domcontentloaded")
    page.get_by_role("link", name="Timeline").click()
    canvas = page.locator('[data-testid="stPlotlyChart"] canvas').first
    canvas.wait_for(state="attached", timeout=90_000)
    page.wait_for_function("() => document.querySelectorAll('[data-testid=\"stPlotlyChart\"] .gl-canvas, "
                           "[data-testid=\"stPlotlyChart\"] canvas').length > 0", timeout=30_000)
    assert page.evaluate("() => !!document.createElement('canvas').getContext('webgl')"), "no WebGL"
    page.wait_for_timeout(2000)  # let WebGL finish drawing
    chart = page.locator('[data-testid="stPlotlyChart"]').first
    shot = chart.screenshot()
    page.screenshot(path=str(ARTIFACTS / "app_timeline.png"), full_page=True)
    for sel in ERROR_SELECTORS:
        assert page.locator(sel).count() == 0, page.locator(sel).first.inner_text()
    assert not console_errors, console_errors
    assert page.get_by_text("segments drawn for").count() == 1
    assert count_colour(shot, (0x1F, 0x77, 0xB4)) > 200, "no compute drawn"
    assert count_colour(shot, (0xFF, 0x7F, 0x0E)) > 200, "no communication drawn"
    # Box-selecting a range on the chart makes it the time window (re-aggregated on the server).
    before = window_values(page)
    page.evaluate("() => document.querySelector('[data-val=\"select\"]')"
                  ".dispatchEvent(new MouseEvent('click', {bubbles: true}))")
    area = page.locator('[data-testid="stPlotlyChart"] .nsewdrag').first.bounding_box()
    x0, y0 = area["x"] + area["width"] * 0.3, area["y"] + area["height"] * 0.5
    page.mouse.move(x0, y0)
    page.mouse.down()
    page.mouse.move(x0 + area["width"] * 0.2, y0 + 20, steps=12)
    page.mouse.up()
    page.wait_for_function("old => { const v = [...document.querySelectorAll("
                           "'[data-testid=\"stSlider\"] input[type=\"range\"]')].map(e => e.value);"
                           " return v.length === 2 && v.join() !== old.join(); }", arg=before, timeout=60_000)
    lo, hi = (float(v) for v in window_values(page))
    full = float(before[1])
    assert 0.25 * full < lo < hi < 0.55 * full, (lo, hi, full)
    for sel in ERROR_SELECTORS:
        assert page.locator(sel).count() == 0, page.locator(sel).first.inner_text()


def test_every_page_renders_without_errors(served: str, browser: Browser) -> None:
    """Each page opened by its URL (deep links work: st.navigation, no legacy pages/ folder)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    for path, title in (("", "Overview"), ("timeline", "Timeline"), ("crossrank", "Cross-rank"),
                        ("syncs", "Syncs"), ("diff", "Diff"), ("run", "Run")):
        page.goto(f"{served}/{path}", wait_until="domcontentloaded")
        page.get_by_role("heading", name=title, exact=True).wait_for(timeout=60_000)
        page.wait_for_timeout(1500)
        for sel in ERROR_SELECTORS:
            assert page.locator(sel).count() == 0, (path, page.locator(sel).first.inner_text())
