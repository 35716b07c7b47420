"""The real app, started with the exact command `overlapscope app` runs, attacked from a real headless
Chromium (Debian's chromium through Playwright): bad uploads, path escapes and hostile links give an
error on the page and never Streamlit's exception element; the server listens on the loopback only;
a forged upload without the XSRF token is refused; two browsers do not see each other's uploads.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from app import data
from overlapscope.cmd_app import streamlit_command

from .bad_inputs import build_corpus, remove_tree
from .conftest import ROOT
from .test_app_browser import free_port, launch_until_healthy, stop_app

if TYPE_CHECKING:
    from playwright.sync_api import Browser

EXCEPTION = '[data-testid="stException"]'
ERROR = '[data-testid="stAlertContentError"]'


def _start(port: int, env: dict[str, str], log: Path):
    """streamlit_command as `overlapscope app` builds it (default address), until /_stcore/health answers."""
    import sys

    cmd = streamlit_command([], port=port, address="127.0.0.1", max_upload_mb=20)
    assert cmd[0] == sys.executable and "--server.enableXsrfProtection" in cmd
    return launch_until_healthy(cmd, port, env, log)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("served")
    samples = tmp / "no-samples"  # nothing to analyze on arrival: every page opens at once
    samples.mkdir()
    corpus = build_corpus(tmp / "corpus")
    env = dict(os.environ)
    env.update({data.ENV_SAMPLES: str(samples), data.ENV_RUNS_DIR: str(tmp / "runs"),
                data.ENV_ALLOWED_ROOTS: str(tmp / "corpus"), "OVERLAPSCOPE_CACHE_DIR": str(tmp / "cache"),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))})
    env.pop(data.ENV_APP_PATHS, None)
    port = free_port()
    proc = _start(port, env, tmp / "streamlit.log")
    try:
        yield f"http://127.0.0.1:{port}", port, corpus, tmp
    finally:
        stop_app(proc)
        remove_tree(corpus["folder nested 1,000 deep"].given)


def _listening_addresses(port: int) -> set[str]:
    """Local addresses of the sockets listening on port (from /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hexport = local.rsplit(":", 1)
            if state == "0A" and int(hexport, 16) == port:  # 0A = LISTEN
                found.add(addr)
    return found


def test_listens_on_the_loopback_only(served) -> None:
    _, port, _, _ = served
    assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1, nothing on 0.0.0.0 or ::


def test_a_forged_upload_without_the_xsrf_token_is_refused(served) -> None:
    url, _, _, _ = served
    req = urllib.request.Request(f"{url}/_stcore/upload_file/some-session/some-file", data=b"x" * 10,
                                 method="PUT", headers={"Content-Type": "application/octet-stream"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=20)
    assert info.value.code == 403


def _wait_idle(page) -> None:
    page.wait_for_timeout(500)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=90_000)
    page.wait_for_timeout(500)


def _open(browser, url: str):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url, wait_until="domcontentloaded")
    page.get_by_role("heading", name="Overview", exact=True).wait_for(timeout=90_000)
    _wait_idle(page)
    return page


def _add_traces_panel(page) -> None:
    """The sidebar's "Add traces" expander, opened (it starts open when there are no runs)."""
    _wait_idle(page)
    box = page.get_by_label("Server path (file or run folder)", exact=True)
    if not box.is_visible():
        page.get_by_text("Add traces").click()
    box.wait_for(timeout=30_000)


BAD_UPLOADS = ("truncated JSON", "gzip bomb (Kineto)", "non-UTF-8 bytes", "no GPU events")
ESCAPES = ("/etc/passwd", "{root}/../../../etc", "{root}/symlink loop/a.json")


@pytest.mark.browser
def test_bad_uploads_and_path_escapes_show_an_error_never_a_stack_trace(served, browser: Browser) -> None:
    """Each bad upload in a fresh page, then each path escape in one page, in turn: one error each."""
    url, _, corpus, tmp = served
    for case in BAD_UPLOADS:
        page = _open(browser, url)  # a fresh session: the uploader holds one batch at a time
        _add_traces_panel(page)
        page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(
            [str(f) for f in corpus[case].files])
        page.locator(ERROR).filter(has_text=corpus[case].problem).first.wait_for(timeout=90_000)
        _wait_idle(page)
        text = page.locator(ERROR).first.inner_text()
        assert "Upload could not be read" in text and corpus[case].problem in text, (case, text)
        assert page.locator(EXCEPTION).count() == 0, case
        page.close()
    page = _open(browser, url)
    _add_traces_panel(page)
    for path in ESCAPES:
        box = page.get_by_label("Server path (file or run folder)", exact=True)
        box.fill(path.format(root=tmp / "corpus"))
        box.press("Enter")
        page.get_by_role("button", name="Add path").click()
        page.locator(ERROR).filter(has_text="Server path refused").first.wait_for(timeout=60_000)
        _wait_idle(page)
        assert page.locator(EXCEPTION).count() == 0, path
        assert "root:x:0:0" not in page.content()


@pytest.mark.browser
def test_hostile_links_render_without_errors(served, browser: Browser) -> None:
    url, _, _, _ = served
    for link in ("/?runs=../../../../etc/passwd", "/timeline?runs=/etc/passwd,server:/etc",
                 "/run?runs=%00%ff"):
        page = browser.new_page()
        page.goto(url + link, wait_until="domcontentloaded")
        page.locator("h1").first.wait_for(timeout=90_000)
        _wait_idle(page)
        assert page.locator(EXCEPTION).count() == 0 and page.locator(ERROR).count() == 0, link
        assert "root:x:0:0" not in page.content()
        page.close()


@pytest.mark.browser
def test_two_browsers_do_not_see_each_others_uploads(served, hta_dir: Path, browser: Browser) -> None:
    url, _, _, tmp = served
    mine = tmp / "alice-private-rank0.json.gz"
    mine.write_bytes((hta_dir / "trace_filter_sampled_rank-0.json.gz").read_bytes())
    alice = _open(browser, url)  # browser.new_page: a context of its own (cookies, session)
    _add_traces_panel(alice)
    alice.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(mine))
    alice.get_by_text(f"Uploaded {mine.name}").wait_for(timeout=120_000)
    assert alice.locator(EXCEPTION).count() == 0
    bob = _open(browser, url)  # another context: its own session and cookies
    bob.locator('[data-testid="stMultiSelect"]').first.click()
    bob.wait_for_timeout(1000)
    assert mine.name not in bob.content()
    assert bob.locator(EXCEPTION).count() == 0


@pytest.mark.browser
def test_menu_is_a_readers_no_deploy(served, browser: Browser) -> None:
    """Started as `overlapscope app` starts it, on 127.0.0.1 (where Streamlit's default shows the developer
    items): the toolbar is there, Deploy is not."""
    url, _, _, _ = served
    page = _open(browser, url)
    page.locator('[data-testid="stMainMenu"]').wait_for(timeout=30_000)
    assert page.locator('[data-testid="stAppDeployButton"]').count() == 0
