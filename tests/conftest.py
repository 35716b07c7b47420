"""Shared fixtures: where the bundled real traces live, and the repo root on sys.path."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Property tests are the same every run: derandomized (examples from a seed fixed per test, so a failure
# reproduces on the next run, never one run in many), no example database, and no health check that times
# data generation (on a loaded 2-core machine it fails a correct test). Each test's @settings still sets
# its own max_examples; HYPOTHESIS_PROFILE=explore searches randomly, as a developer may when hunting bugs.
settings.register_profile("suite", derandomize=True, database=None, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Unchanged copies of public traces from other projects (attribution: tests/data/public/README.md).
PUBLIC = ROOT / "tests" / "data" / "public"
HTA_TRACES = PUBLIC / "hta"
NSYS_PACKED = PUBLIC / "nsys"  # SQLite exports stored gzipped (.sqlite.gz) to keep the repository lean


def _unpack_nsys(packed: Path) -> Path:
    """The nsys exports as plain .sqlite files in a private temp dir (tests open and copy them)."""
    out = Path(tempfile.mkdtemp(prefix="overlapscope-test-nsys-"))
    for src in sorted(packed.iterdir()):
        if src.name.endswith(".sqlite.gz"):
            with gzip.open(src, "rb") as fin, (out / src.name[: -len(".gz")]).open("wb") as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
        elif src.is_file() and src.name != "README.md":
            shutil.copy(src, out / src.name)
    return out


NSYS_TRACES = _unpack_nsys(NSYS_PACKED)
# CLI runs in tests parse through the parse cache: keep it private to the test session.
os.environ.setdefault("OVERLAPSCOPE_CACHE_DIR", tempfile.mkdtemp(prefix="overlapscope-test-cache-"))
SAMPLES = ROOT / "sample_traces"
# Tests marked `hta` compare with HolisticTraceAnalysis, which only the bench extra installs.
HTA_MISSING = ("HolisticTraceAnalysis is not installed: pip install -e '.[bench]' runs the comparisons "
               "(CI runs them in a step of their own)")


# Tests marked `browser` drive Debian's chromium (Playwright through executable_path; kaleido for PNG/SVG),
# never a downloaded browser. Where it is missing they do not run, and one line says so and how to get it
# (pytest_terminal_summary below) rather than a traceback per test; README's test command still passes
# on a fresh machine. Under CI (CI=true, as .ci/run runs, which installs chromium) or
# OVERLAPSCOPE_REQUIRE_BROWSER=1, a missing chromium fails the session instead: there they must run.
CHROMIUM = os.environ.get("OVERLAPSCOPE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_MISSING = (f"{CHROMIUM} not found: install Debian's chromium (sudo apt-get install chromium) or set "
                    "OVERLAPSCOPE_CHROMIUM to a Chromium binary; `-m 'not browser'` leaves these tests out")
BROWSER_TESTS_NOT_RUN = pytest.StashKey[int]()
BROWSER_REQUIRED = os.environ.get("CI", "").lower() in ("1", "true") or os.environ.get(
    "OVERLAPSCOPE_REQUIRE_BROWSER") == "1"


class BrowserGate:
    """Leaves the browser tests out where chromium is missing. A plugin object of its own (registered in
    pytest_configure), as its collection hook must run after -m / -k (a run that deselected the browser tests
    needs no chromium) while this conftest's own collection hook marks the slow tier before them."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        needing = [item for item in items if item.get_closest_marker("browser")]
        if not needing or Path(CHROMIUM).is_file():
            return
        items[:] = [item for item in items if not item.get_closest_marker("browser")]
        config.hook.pytest_deselected(items=needing)
        config.stash[BROWSER_TESTS_NOT_RUN] = len(needing)


def pytest_configure(config: pytest.Config) -> None:
    if BROWSER_REQUIRED and not Path(CHROMIUM).is_file():  # in the controller and every xdist worker
        raise pytest.UsageError(f"FAILED: the browser tests must run here (CI): {CHROMIUM_MISSING}")
    config.pluginmanager.register(BrowserGate(), "overlapscope-browser-gate")
    if hasattr(config.option, "loadscopereorder"):  # xdist: hand modules out in collection order (tests/tiers.py)
        config.option.loadscopereorder = False


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    not_run = config.stash.get(BROWSER_TESTS_NOT_RUN, 0)
    if not_run or (not Path(CHROMIUM).is_file() and getattr(config, "workerinput", None) is None
                   and config.getoption("numprocesses", None)):  # xdist: the workers collected
        count = f"{not_run} " if not_run else ""
        terminalreporter.write_line(f"NOT RUN: {count}browser tests: {CHROMIUM_MISSING}", red=True, bold=True)


# WebGL without a GPU: SwiftShader through ANGLE.
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--use-gl=angle", "--use-angle=swiftshader", "--enable-unsafe-swiftshader"]


def launch_chromium(driver):
    """Debian's chromium through a Playwright driver (the browser tests, and the scripts in benchmarks/ and docs/)."""
    return driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


@pytest.fixture(scope="module")
def chromium():
    """One Playwright driver and one Debian chromium per test module, started by its first browser test: each start
    costs ~2.4 s on the 2-core machine, and the 26 browser tests are in 8 modules. Per module, not per session:
    while its driver lives, Playwright marks its event loop as running in this thread (playwright/_impl/
    _greenlets.py), and a later module's asyncio.run() or Dask client would find it."""
    from playwright.sync_api import sync_playwright

    driver = sync_playwright().start()
    try:
        launched = launch_chromium(driver)
        yield launched
        launched.close()
    finally:
        driver.stop()


@pytest.fixture()
def browser(chromium):
    """The shared chromium for one test. browser.new_page and browser.new_context each open a context of their own
    (cookies, storage, so a Streamlit session of its own), as a freshly launched browser would; every context the
    test opened is closed after it."""
    yield chromium
    for context in chromium.contexts:
        context.close()


@pytest.fixture(scope="session")
def hta_dir() -> Path:
    return HTA_TRACES


def tree_digest(*roots: Path) -> dict[str, tuple[str, int]]:
    """(sha256, mtime_ns) of every file under the roots, and the names of every entry (a new -wal/-shm
    or cache file beside an input shows as an extra key)."""
    out: dict[str, tuple[str, int]] = {}
    for root in roots:
        paths = [root] if not root.is_dir() or root.is_symlink() else _entries(root)
        for p in paths:
            if p.is_symlink() or not p.is_file():
                kind = "link" if p.is_symlink() else "dir" if p.is_dir() else "special"  # a FIFO is never read
                out[str(p)] = (kind, p.lstat().st_mtime_ns if kind == "special" else 0)
                continue
            try:
                out[str(p)] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            except PermissionError:
                out[str(p)] = ("unreadable", p.stat().st_mtime_ns)
    return out


def _entries(root: Path) -> list[Path]:
    """Every entry under root, sorted, without recursion (a folder nested 1,000 deep is a test input)."""
    found, stack = [], [root]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                found.append(Path(e.path))
                if e.is_dir(follow_symlinks=False):
                    stack.append(Path(e.path))
    return sorted(found)


# Inputs every test reads: nothing the suite runs may change them (inputs are never modified).
WATCHED_INPUTS = (PUBLIC, ROOT / "sample_traces")


@pytest.fixture(scope="session", autouse=True)
def inputs_unchanged_by_the_suite():
    """Hash the bundled traces before the first test and after the last: any change fails the session."""
    before = tree_digest(*WATCHED_INPUTS)
    yield
    after = tree_digest(*WATCHED_INPUTS)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"the test suite modified its inputs: {changed[:10]}"


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(NSYS_TRACES, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from .tiers import heaviest_first, mark_slow

    mark_slow(items)
    heaviest_first(items)
