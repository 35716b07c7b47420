"""The app's first chart on the 8 x 54 MB set, in a real browser, against the CLI's cold `analyze`.

The set: 8 ranks of the public 54 MB Kineto trace (tests/data/public/hta/df_index_resolver.json.gz),
built by benchmarks/bench_many_ranks.py (hard links, rank from the file name). Both runs start with an
empty parse cache (a fresh OVERLAPSCOPE_CACHE_DIR each, so the CLI's report cache is empty too), so both
parse every file, on the same machine, in the same round:
  CLI    `overlapscope analyze SET -f json`: wall time of the whole process
  app    `overlapscope app SET --port P` (the server, app/serve.py, loads and analyzes SET as it starts).
         Chromium is started first (not timed); the clock starts when the command starts, so the server's
         start, the imports, the parse and the analysis are all inside it. The browser opens the Overview
         as soon as /_stcore/health answers. Recorded: first chart (the Overview's first Plotly chart drawn),
         page complete (the script has finished and every chart on the page is drawn), both from the
         command's start; then a second browser session on the warm server (navigation to first chart).
The ratio is app first chart / CLI cold `analyze`. Rounds alternate CLI and app; medians at the end.
--baseline DIR also measures, in every round, the app of another checkout (e.g. `git worktree add DIR
COMMIT`), started by its own `overlapscope app`, on the same set: a before/after under the same load.

usage: python benchmarks/bench_app_first_chart.py [--repeat 3] [--ranks 8] [--baseline DIR]
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
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_many_ranks import build_set  # noqa: E402

FIRST_CHART_JS = ("() => [...document.querySelectorAll('[data-testid=\"stPlotlyChart\"] .js-plotly-plot')]"
                  ".some(p => p._fullData && p._fullData.length > 0)")
COMPLETE_JS = ("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"
               " && document.querySelector('[data-testid=\"stPlotlyChart\"]')"
               " && [...document.querySelectorAll('[data-testid=\"stPlotlyChart\"]')].every(e => {"
               " const p = e.querySelector('.js-plotly-plot'); return p && p._fullData; })")


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


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def _settle(page) -> None:
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


def app_cold(folder: Path, root: Path = ROOT) -> dict[str, float]:
    """Seconds from `overlapscope app SET` to the server's health, the first chart and the complete page; then
    a second session's navigation to first chart."""
    from playwright.sync_api import sync_playwright

    from tests.test_app_browser import free_port, launch_browser

    cache = Path(tempfile.mkdtemp(prefix="overlapscope-bench-cache-"))
    env = {**os.environ, "PYTHONPATH": str(root), "OVERLAPSCOPE_CACHE_DIR": str(cache),
           "OVERLAPSCOPE_SAMPLES": str(cache / "no-samples")}
    port = free_port()
    out: dict[str, float] = {}
    with sync_playwright() as p:
        browser = launch_browser(p)
        ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
        page = ctx.new_page()
        log = (cache / "app.log").open("w")
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "overlapscope", "app", str(folder), "--port", str(port)],
                                cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while not _healthy(port):
                if proc.poll() is not None or time.perf_counter() - t0 > 120:
                    raise RuntimeError(f"the app did not start:\n{(cache / 'app.log').read_text()[-2000:]}")
                time.sleep(0.05)
            out["health"] = time.perf_counter() - t0
            page.goto(f"http://127.0.0.1:{port}/", wait_until="commit")
            page.wait_for_function(FIRST_CHART_JS, timeout=600_000, polling=50)
            _settle(page)
            out["first_chart"] = time.perf_counter() - t0
            page.wait_for_function(COMPLETE_JS, timeout=600_000, polling=50)
            _settle(page)
            out["complete"] = time.perf_counter() - t0
            ctx.close()
            ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
            page = ctx.new_page()
            t = time.perf_counter()
            page.goto(f"http://127.0.0.1:{port}/", wait_until="commit")
            page.wait_for_function(FIRST_CHART_JS, timeout=600_000, polling=50)
            _settle(page)
            out["warm_first_chart"] = time.perf_counter() - t
            ctx.close()
        finally:
            browser.close()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)  # the command and the server it started
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
            log.close()
            print((cache / "app.log").read_text()[-3000:]) if os.environ.get("BENCH_LOG") else None
            shutil.rmtree(cache, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--baseline", type=Path, help="another checkout whose app is measured too, in every round")
    a = ap.parse_args()
    folder = build_set(a.ranks)
    print(f"machine: {platform.machine()}, {len(os.sched_getaffinity(0))} cores, Python {platform.python_version()}; "
          f"set: {a.ranks} x 54 MB ({folder})")
    rows = []
    for i in range(a.repeat):
        load = os.getloadavg()[0]
        cli = cli_cold(folder)
        app = app_cold(folder)
        rows.append({"cli": cli, **app, "ratio": app["first_chart"] / cli})
        if a.baseline:
            base = app_cold(folder, a.baseline.resolve())
            rows[-1].update({f"base_{k}": v for k, v in base.items()}, base_ratio=base["first_chart"] / cli)
        print(f"round {i + 1} (load avg {load:.1f} -> {os.getloadavg()[0]:.1f}): CLI cold analyze {cli:.2f} s; "
              f"app (from `overlapscope app`): healthy {app['health']:.2f} s, first chart {app['first_chart']:.2f} s, "
              f"page complete {app['complete']:.2f} s; second session first chart {app['warm_first_chart']:.2f} s; "
              f"first chart / CLI {rows[-1]['ratio']:.2f}x", flush=True)
        if a.baseline:
            r = rows[-1]
            print(f"  baseline {a.baseline}: healthy {r['base_health']:.2f} s, "
                  f"first chart {r['base_first_chart']:.2f} s, page complete {r['base_complete']:.2f} s; "
                  f"second session {r['base_warm_first_chart']:.2f} s; first chart / CLI {r['base_ratio']:.2f}x",
                  flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"median: CLI {med['cli']:.2f} s, app first chart {med['first_chart']:.2f} s, page complete "
          f"{med['complete']:.2f} s, second session {med['warm_first_chart']:.2f} s; ratio (median of rounds) "
          f"{med['ratio']:.2f}x")
    if a.baseline:
        print(f"median baseline: first chart {med['base_first_chart']:.2f} s, "
              f"page complete {med['base_complete']:.2f} s, second session {med['base_warm_first_chart']:.2f} s; "
              f"ratio {med['base_ratio']:.2f}x")


if __name__ == "__main__":
    main()
