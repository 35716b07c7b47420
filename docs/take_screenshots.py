"""Screenshots of every dashboard page for the docs: docs/screenshots/<page>.png.

Starts the real app (`streamlit run app/main.py`) headless, opens each page in Debian's
Chromium (Playwright with executable_path; never a downloaded browser), waits until the
page's charts have drawn, and saves a palette PNG of the whole page.

usage: python docs/take_screenshots.py [--runs LABEL,LABEL] [--out docs/screenshots] [PATH...]
  no PATH: the bundled sample traces (what `overlapscope app` opens on), with the runs of
  docs/app.md's screenshots selected: a loop with a host sync in it and its fix (SAMPLE_RUNS),
  the Syncs page on the run with the most blocking syncs (SAMPLE_PAGE_RUNS);
  --runs: which runs to select, by label (e.g. ag-gemm/sync-in-loop,ag-gemm/sync-before-loop).
A page that shows an error fails the script (exit 1), so a broken page is never pictured.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
USER_ENV = dict(os.environ)  # before the tests' conftest points the cache at a temporary folder

from app.ui import PAGE_FILES  # noqa: E402
from tests.test_app_browser import free_port, launch_browser, start_app, stop_app  # noqa: E402

TITLES = {"overview": "Overview", "timeline": "Timeline", "crossrank": "Cross-rank", "stragglers": "Stragglers",
          "syncs": "Syncs", "collectives": "Collectives", "diff": "Diff", "run": "Run"}  # as app/main.py names them
# (name, URL path, heading) of every page in the app's registry: a new page without a title here fails loudly
PAGES = tuple((name, "" if name == "overview" else Path(f).stem, TITLES[name]) for name, f in PAGE_FILES.items())
SAMPLE_RUNS = "ag-gemm/sync-in-loop,ag-gemm/sync-before-loop"
SAMPLE_PAGE_RUNS = ["syncs=ag-gemm/host-sync"]
WIDTH = 1440
MAX_HEIGHT = 4200


def save_png(png: bytes, path: Path, colours: int = 256) -> int:
    """Palette PNG: screenshots are mostly flat colours, so 256 of them keep them sharp and small."""
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB").quantize(colours, method=Image.Quantize.FASTOCTREE)
    img.save(path, optimize=True)
    return path.stat().st_size


HEIGHT_JS = ("() => { const m = document.querySelector('[data-testid=\"stMainBlockContainer\"]');"
             " return m ? m.scrollHeight + 120 : document.body.scrollHeight; }")
DRAWN_JS = ("() => !document.querySelector('[data-testid=\"stStatusWidget\"]') && "
            "[...document.querySelectorAll('[data-testid=\"stPlotlyChart\"]')].every("
            "c => { const p = c.querySelector('.js-plotly-plot'); return p && p._fullLayout; })")


def wait_until_drawn(page) -> None:
    """The script run finished (no running indicator) and every chart has been laid out."""
    page.wait_for_timeout(800)
    page.wait_for_function(DRAWN_JS, timeout=300_000)
    page.wait_for_timeout(1500)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--runs", default="", help="comma-separated run labels to select")
    ap.add_argument("--page-runs", action="append", default=[], metavar="PAGE=LABELS",
                    help="other runs for one page, e.g. syncs=ag-gemm/host-sync (repeatable)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    ap.add_argument("--pages", default=",".join(p[0] for p in PAGES))
    args = ap.parse_args()
    if not args.paths and not args.runs:
        args.runs, args.page_runs = SAMPLE_RUNS, args.page_runs or SAMPLE_PAGE_RUNS

    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    env = dict(USER_ENV)  # the app as a user starts it: their cache and runs folders
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    port = free_port()
    log = Path(tempfile.gettempdir()) / "overlapscope-screenshots-streamlit.log"
    proc = start_app(port, env, log, paths=args.paths)
    def query(runs: str) -> str:
        return f"?runs={urllib.parse.quote(runs, safe=',/')}" if runs else ""

    per_page = dict(item.split("=", 1) for item in args.page_runs)
    wanted = set(args.pages.split(","))
    failed = 0
    try:
        with sync_playwright() as p:
            browser = launch_browser(p)
            try:
                for name, path, title in PAGES:
                    if name not in wanted:
                        continue
                    page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
                    runs = per_page.get(name, args.runs)
                    page.goto(f"http://127.0.0.1:{port}/{path}{query(runs)}", wait_until="domcontentloaded")
                    page.get_by_role("heading", name=title, exact=True).wait_for(timeout=300_000)
                    wait_until_drawn(page)
                    height = 0
                    for _ in range(5):  # grow the viewport to the page until its height is stable
                        new = page.evaluate(HEIGHT_JS)
                        if new == height:
                            break
                        height = new
                        page.set_viewport_size({"width": WIDTH, "height": int(min(max(height, 900), MAX_HEIGHT))})
                        wait_until_drawn(page)
                    errors = page.locator('[data-testid="stException"], [data-testid="stAlertContentError"]')
                    if errors.count():
                        print(f"{name}: error on the page: {errors.first.inner_text()[:300]}", file=sys.stderr)
                        failed += 1
                    size = save_png(page.screenshot(), args.out / f"{name}.png")
                    print(f"{args.out / f'{name}.png'}: {size / 1024:.0f} KiB")
                    page.close()
            finally:
                browser.close()
    finally:
        stop_app(proc)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
