"""The real app in Debian's Chromium (Playwright) on a run whose kernel and folder names carry Markdown, HTML,
links and image references: no page makes the browser fetch an outside URL, no name
becomes a link, an image or a tag, and uploads with a NUL or a 300-character name give a line, not a stack
trace. Every request the page makes is recorded; anything not for the app's own server is blocked and fails
the test.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest

from app import data

from .conftest import ROOT
from .hostile_names import hostile_run
from .test_app_browser import free_port, launch_until_healthy, stop_app

if TYPE_CHECKING:
    from playwright.sync_api import Browser

EXCEPTION = '[data-testid="stException"]'
PAGES = ("", "timeline", "crossrank", "stragglers", "syncs", "collectives", "diff", "run")
FOLDER = "x ![i](http://evil.example/run.png) <img src=x onerror=alert(1)> [/dim] |r www.evil.example"  # nested


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    from overlapscope.cmd_app import streamlit_command

    tmp = tmp_path_factory.mktemp("served-hostile")
    samples = tmp / "samples"
    run = hostile_run(samples, folder=FOLDER)
    (run / "manifest.json").write_text(json.dumps({
        "status": "ok", "algorithm": "demo", "variant": "baseline", "world_size": 2, "profiler": "torch",
        "variant_help": "![pixel](http://evil.example/help.png) <img src=http://evil.example/i.png> "
                        "[link](https://evil.example) https://evil.example/bare",
        "gpus": ["H100 ![g](http://evil.example/g.png)"]}))
    shutil.copytree(run, samples / "twin")
    env = dict(os.environ)
    env.update({data.ENV_SAMPLES: str(samples), data.ENV_RUNS_DIR: str(tmp / "runs"),
                "OVERLAPSCOPE_CACHE_DIR": str(tmp / "cache"),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))})
    for var in (data.ENV_APP_PATHS, data.ENV_ALLOWED_ROOTS):
        env.pop(var, None)
    port = free_port()
    proc = launch_until_healthy(streamlit_command([], port=port, address="127.0.0.1", max_upload_mb=20), port, env,
                                tmp / "streamlit.log")
    try:
        yield f"http://127.0.0.1:{port}", tmp
    finally:
        stop_app(proc)


def _idle(page) -> None:
    page.wait_for_timeout(500)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=180_000)
    page.wait_for_timeout(800)


def test_no_page_fetches_or_links_what_a_name_holds(served, browser: Browser) -> None:
    url, _ = served
    outside: list[str] = []

    def guard(route) -> None:
        host = urlsplit(route.request.url).hostname
        if host in ("127.0.0.1", "localhost") or route.request.url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context = browser.new_context(viewport={"width": 1500, "height": 1100})
    context.route("**/*", guard)
    page = context.new_page()
    shown = ""
    for name in PAGES:
        page.goto(f"{url}/{name}", wait_until="domcontentloaded")
        page.locator("h1").first.wait_for(timeout=180_000)
        _idle(page)
        for box in page.locator('[data-testid="stExpander"] summary').all()[:12]:
            box.click()  # findings and notes, opened: their text rendered too
        _idle(page)
        assert page.locator(EXCEPTION).count() == 0, name
        dom = page.evaluate("""() => ({
            imgs: [...document.querySelectorAll('img')].map(i => i.src).filter(s => s.includes('evil')),
            links: [...document.querySelectorAll('a')].map(a => a.href).filter(
                h => h.includes('evil') && new URL(h).origin + new URL(h).pathname
                     !== location.origin + location.pathname),  // a heading's own #anchor is no link out
            handlers: [...document.querySelectorAll('[onerror],[onload],[onclick]')].length,
            text: document.body.innerText})""")
        assert dom["imgs"] == [] and dom["links"] == [] and dom["handlers"] == 0, (name, dom["imgs"],
                                                                                  dom["links"])
        shown += dom["text"]
    assert outside == [], outside
    assert "<img src=x onerror=alert" in shown  # the names are on the pages, as the text they are
    assert "evil.example" in shown


def test_hostile_upload_names_give_a_line_not_a_stack_trace(served, browser: Browser) -> None:
    url, _ = served
    content = (ROOT / "sample_traces" / "ag-gemm" / "baseline" / "rank0.json.gz").read_bytes()
    names = ["a\u0000b.json.gz", "r" * 300 + ".json.gz", "![x](http://evil.example/u.png)<img src=x>.json.gz"]
    for name in names:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("heading", name="Overview", exact=True).wait_for(timeout=180_000)
        _idle(page)
        box = page.get_by_label("Server path (file or run folder)", exact=True)
        if not box.is_visible():
            page.get_by_text("Add traces").click()
        try:
            page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(
                [{"name": name, "mimeType": "application/gzip", "buffer": content}])
        except Exception as exc:  # noqa: BLE001 - the browser itself refuses the name: nothing to upload
            assert "\u0000" in name, exc
            page.close()
            continue
        page.locator('[data-testid="stAlertContentSuccess"], [data-testid="stAlertContentError"]').first \
            .wait_for(timeout=180_000)
        _idle(page)
        assert page.locator(EXCEPTION).count() == 0, (name, page.locator(EXCEPTION).first.inner_text())
        assert page.evaluate("() => [...document.querySelectorAll('img')].filter(i => i.src.includes("
                             "'evil')).length") == 0
        page.close()
