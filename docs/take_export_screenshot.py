"""README's screenshot of an exported HTML report: run the export command, open the file in the
system Chromium (network blocked) and keep the top of the page and its timeline.

usage: python docs/take_export_screenshot.py   (from the repository root)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "screenshots" / "export-html.png"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--use-gl=angle", "--use-angle=swiftshader",
                 "--enable-unsafe-swiftshader"]


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        page_file = Path(tmp) / "host-sync.html"
        subprocess.run([sys.executable, "-m", "overlapscope", "export", "sample_traces/ag-gemm/host-sync",
                        "--html", str(page_file)], cwd=ROOT, check=True)
        full = Path(tmp) / "full.png"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            context = browser.new_context(offline=True, viewport={"width": 1500, "height": 900})
            page = context.new_page()
            page.goto(page_file.as_uri())
            page.wait_for_selector("#timeline canvas", state="attached", timeout=60_000)
            page.wait_for_timeout(2000)
            timeline_top = page.locator("h2", has_text="Timeline").bounding_box()["y"]
            syncs_top = page.locator("h2", has_text="Blocking host syncs").bounding_box()["y"]
            page.screenshot(path=str(full), full_page=True)
            browser.close()
        img = Image.open(full)
        top = img.crop((0, 0, img.width, int(syncs_top) - 10))  # title, metrics, figures, findings
        tl = img.crop((0, int(timeline_top) - 10, img.width, img.height))
        out = Image.new("RGB", (img.width, top.height + tl.height), "white")
        out.paste(top, (0, 0))
        out.paste(tl, (0, top.height))
        out.save(OUT, optimize=True)
    print(f"wrote {OUT.relative_to(ROOT)} ({out.width}x{out.height})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
