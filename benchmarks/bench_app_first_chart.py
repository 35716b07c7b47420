"""The app's first chart on the 8 x 54 MB set, in a real browser, against the CLI's cold `analyze`.

The set: 8 ranks of the public 54 MB Kineto trace (tests/data/public/hta/df_index_resolver.json.gz),
built by benchmarks/bench_many_ranks.py (hard links, rank from the file name). Both runs start with an
empty parse cache (a fresh OVERLAPSCOPE_CACHE_DIR each), so both parse every file:
  CLI    `overlapscope analyze SET -f json`, wall time of the whole process
  app    `streamlit run app/main.py -- SET` started and healthy first (not timed); Chromium opens the
         Overview: time from navigation until its first Plotly chart is drawn (parse and analysis
         included, the app's caches empty), then a second session (caches warm)
The ratio app / CLI is what the app adds to the CLI's answer. Rounds alternate CLI and app.

usage: python benchmarks/bench_app_first_chart.py [--repeat 2] [--ranks 8]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_many_ranks import build_set  # noqa: E402

CHART_JS = ("() => { const p = document.querySelector('[data-testid=\"stPlotlyChart\"] .js-plotly-plot');"
            " return !document.querySelector('[data-testid=\"stStatusWidget\"]') && p && p._fullData"
            " && p._fullData.length > 0; }")


def cli_cold(folder: Path) -> float:
    cache = Path(tempfile.mkdtemp(prefix="overlapscope-bench-cache-"))
    try:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "overlapscope", "analyze", str(folder), "-f", "json"], check=True,
                       stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT),
                                                       "OVERLAPSCOPE_CACHE_DIR": str(cache)})
        return time.perf_counter() - t
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def app_first_chart(folder: Path) -> tuple[float, float]:
    """(cold, warm) seconds from navigation to the Overview's first drawn chart."""
    from playwright.sync_api import sync_playwright

    from tests.test_app_browser import free_port, launch_browser, start_app, stop_app

    cache = Path(tempfile.mkdtemp(prefix="overlapscope-bench-cache-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OVERLAPSCOPE_CACHE_DIR": str(cache),
           "OVERLAPSCOPE_SAMPLES": str(cache / "no-samples")}
    port = free_port()
    proc = start_app(port, env, cache / "streamlit.log", paths=[str(folder)])
    times = []
    try:
        with sync_playwright() as p:
            browser = launch_browser(p)
            try:
                for _ in range(2):
                    ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
                    page = ctx.new_page()
                    t = time.perf_counter()
                    page.goto(f"http://127.0.0.1:{port}/", wait_until="domcontentloaded")
                    page.wait_for_function(CHART_JS, timeout=600_000, polling=50)
                    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
                    times.append(time.perf_counter() - t)
                    ctx.close()
            finally:
                browser.close()
    finally:
        stop_app(proc)
        shutil.rmtree(cache, ignore_errors=True)
    return times[0], times[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=8)
    a = ap.parse_args()
    folder = build_set(a.ranks)
    print(f"machine: {platform.machine()}, {len(os.sched_getaffinity(0))} cores, Python {platform.python_version()}; "
          f"set: {a.ranks} x 54 MB ({folder})")
    cli, cold, warm = [], [], []
    for i in range(a.repeat):
        cli.append(cli_cold(folder))
        c, w = app_first_chart(folder)
        cold.append(c)
        warm.append(w)
        print(f"round {i + 1}: CLI cold analyze {cli[-1]:.2f} s; app first chart cold {c:.2f} s, warm {w:.2f} s; "
              f"app cold / CLI cold {c / cli[-1]:.2f}x; load avg {os.getloadavg()[0]:.1f}", flush=True)
    print(f"median: CLI {statistics.median(cli):.2f} s, app cold {statistics.median(cold):.2f} s "
          f"({statistics.median(cold) / statistics.median(cli):.2f}x), app warm {statistics.median(warm):.2f} s")


if __name__ == "__main__":
    main()
