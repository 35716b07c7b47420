"""A full tour of the dashboard in a real browser: each page's first meaningful paint, against the CLI's cold
`analyze` of the same runs.

The runs: the five ag-gemm sample variants (baseline, sync-in-loop, sync-before-loop, host-sync, tuned), or the
folders given with --runs. Both sides start with an empty parse and report cache (a fresh
OVERLAPSCOPE_CACHE_DIR each), on the same machine, in the same round:
  CLI   `overlapscope analyze RUN -f json` for each run, one after the other: the sum of the processes' wall times
  app   `overlapscope app RUN... --port P`; Chromium is started first (not timed) and the clock starts with the
        command, so the server's start, its imports, the parse and the analysis are inside every figure. The
        browser opens the Overview once /_stcore/health answers, then clicks through every page in the sidebar.
First meaningful paint, per page:
  Overview      the decision's headline ("Fastest: ...") is on the screen: the runs ranked, priced, fix-all
  other pages   the page's script has finished (no running indicator) and its first chart (or, on a page
                without one, its first table or metric) is drawn
The first visit is the Overview's figure from the command's start; the ratio is that over the CLI's total.

usage: python benchmarks/bench_app_tour.py [--repeat 2] [--runs DIR ...]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_app_first_chart import _healthy, _settle  # noqa: E402

VARIANTS = ("baseline", "sync-in-loop", "sync-before-loop", "host-sync", "tuned")
PAGES = ("Timeline", "Cross-rank", "Stragglers", "Syncs", "Collectives", "Diff", "Run")
DECISION_JS = ("() => [...document.querySelectorAll('[data-testid=\"stAlertContentSuccess\"]')]"
               ".some(e => e.innerText.startsWith('Fastest'))")
PAGE_JS = ("(title) => { const h = document.querySelector('h1');"
           " if (!h || !h.innerText.startsWith(title)) return false;"
           " if (document.querySelector('[data-testid=\"stStatusWidget\"]')) return false;"
           " const charts = [...document.querySelectorAll('[data-testid=\"stPlotlyChart\"] .js-plotly-plot')];"
           " if (charts.length) return charts[0]._fullData && charts[0]._fullData.length > 0;"
           " return !!document.querySelector('[data-testid=\"stDataFrame\"], [data-testid=\"stMetric\"],"
           " [data-testid=\"stCode\"]'); }")


def cli_cold(folders: list[Path]) -> float:
    cache = Path(tempfile.mkdtemp(prefix="overlapscope-bench-cache-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OVERLAPSCOPE_CACHE_DIR": str(cache)}
    try:
        t = time.perf_counter()
        for f in folders:
            subprocess.run([sys.executable, "-m", "overlapscope", "analyze", str(f), "-f", "json"], check=True,
                           stdout=subprocess.DEVNULL, env=env)
        return time.perf_counter() - t
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def tour(folders: list[Path]) -> dict[str, float]:
    """Seconds from `overlapscope app RUN...` to the Overview's decision, then per page from its click."""
    from playwright.sync_api import sync_playwright

    from tests.test_app_browser import free_port, launch_browser

    cache = Path(tempfile.mkdtemp(prefix="overlapscope-bench-cache-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OVERLAPSCOPE_CACHE_DIR": str(cache)}
    port = free_port()
    out: dict[str, float] = {}
    with sync_playwright() as p:
        browser = launch_browser(p)
        page = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
        log = (cache / "app.log").open("w")
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "overlapscope", "app", *map(str, folders), "--port", str(port)],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            while not _healthy(port):
                if proc.poll() is not None or time.perf_counter() - t0 > 120:
                    raise RuntimeError(f"the app did not start:\n{(cache / 'app.log').read_text()[-2000:]}")
                time.sleep(0.05)
            out["health"] = time.perf_counter() - t0
            page.goto(f"http://127.0.0.1:{port}/", wait_until="commit")
            page.wait_for_function(DECISION_JS, timeout=600_000, polling=50)
            _settle(page)
            out["Overview"] = time.perf_counter() - t0
            for name in PAGES:
                t = time.perf_counter()
                page.locator('[data-testid="stSidebarNav"] a', has_text=name).first.click()
                page.wait_for_function(PAGE_JS, arg=name, timeout=600_000, polling=50)
                _settle(page)
                out[name] = time.perf_counter() - t
        finally:
            browser.close()
            proc.send_signal(signal.SIGTERM)  # `overlapscope app` stops its server's process group
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
            log.close()
            shutil.rmtree(cache, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--runs", type=Path, nargs="*")
    a = ap.parse_args()
    folders = [p.resolve() for p in a.runs] if a.runs else [ROOT / "sample_traces" / "ag-gemm" / v for v in VARIANTS]
    print(f"machine: {platform.machine()}, {len(os.sched_getaffinity(0))} cores, Python {platform.python_version()}; "
          f"runs: {', '.join(str(f.relative_to(ROOT)) if f.is_relative_to(ROOT) else str(f) for f in folders)}")
    rows = []
    for i in range(a.repeat):
        load = os.getloadavg()[0]
        cli = cli_cold(folders)
        app = tour(folders)
        rows.append({"cli": cli, **app, "ratio": app["Overview"] / cli})
        pages = ", ".join(f"{k} {app[k]:.2f} s" for k in PAGES)
        print(f"round {i + 1} (load avg {load:.1f} -> {os.getloadavg()[0]:.1f}): CLI cold analyze {cli:.2f} s; app: "
              f"healthy {app['health']:.2f} s, Overview decision {app['Overview']:.2f} s from the command "
              f"({rows[-1]['ratio']:.2f}x the CLI); then per page from its click: {pages}", flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"median: CLI {med['cli']:.2f} s, Overview decision {med['Overview']:.2f} s ({med['ratio']:.2f}x); "
          + ", ".join(f"{k} {med[k]:.2f} s" for k in PAGES))


if __name__ == "__main__":
    main()
