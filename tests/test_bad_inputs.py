"""Every bad input of the corpus (tests/bad_inputs.py) through every entry point: `analyze` (a real
subprocess: exit code 3, exactly one line on stderr naming the file and the problem, no traceback,
no stray warning), `diff`, the analysis step of `run`, and the app (an error on the page, never
Streamlit's exception element). Inputs are hashed before and after every command.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from overlapscope.cli import main

from .bad_inputs import CASE_NAMES, Case, build_corpus, good_trace, remove_tree
from .conftest import ROOT, tree_digest

MAIN = str(ROOT / "app" / "main.py")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory):
    cases = build_corpus(tmp_path_factory.mktemp("corpus"))
    yield cases
    remove_tree(cases["folder nested 1,000 deep"].given)


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return good_trace(tmp_path_factory.mktemp("good"))


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unpacked exports go to a per-test cache, never the user's; no nsys is found."""
    monkeypatch.setenv("OVERLAPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("NSYS", str(tmp_path / "no-nsys"))


def _case_root(case: Case) -> Path:
    return case.given if case.given.is_dir() and not case.given.is_symlink() else case.given.parent


def one_error_line(stderr: str, case: Case, prefix: str = "overlapscope: error: ") -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    line = lines[0]
    assert line.startswith(prefix), line
    assert "Traceback" not in stderr
    return line


def test_corpus_holds_every_case(corpus: dict[str, Case]) -> None:
    assert list(corpus) == list(CASE_NAMES)


# --------------------------------------------------------------------------- analyze (subprocess)


@pytest.fixture(scope="module")
def analyze_runs(corpus: dict[str, Case], tmp_path_factory: pytest.TempPathFactory):
    """`overlapscope analyze CASE` for every case, two at a time, with each case's files hashed around it."""
    cache = tmp_path_factory.mktemp("analyze-cache")
    env = {**os.environ, "OVERLAPSCOPE_CACHE_DIR": str(cache), "NSYS": str(cache / "no-nsys")}

    def one(case: Case):
        before = tree_digest(_case_root(case))
        done = subprocess.run([sys.executable, "-m", "overlapscope", "analyze", str(case.given)], cwd=ROOT,
                              capture_output=True, text=True, timeout=300, env=env)
        return done, before, tree_digest(_case_root(case))

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(corpus, pool.map(one, corpus.values()), strict=True))
    return results, cache


@pytest.mark.parametrize("name", CASE_NAMES)
def test_analyze_refuses_with_one_line(name: str, corpus: dict[str, Case], analyze_runs) -> None:
    case = corpus[name]
    done, before, after = analyze_runs[0][name]
    assert done.returncode == 3, (done.returncode, done.stderr)
    line = one_error_line(done.stderr, case)
    assert line.startswith(f"overlapscope: error: {case.names}: "), line
    assert case.problem in line, line
    assert done.stdout == ""
    assert before == after, "the input changed (or a file appeared beside it)"


def test_bombs_leave_no_partial_unpacked_export(analyze_runs) -> None:
    cache = analyze_runs[1]
    assert not [p for p in cache.rglob("*") if p.is_file() and p.stat().st_size > 1 << 20]


def test_gzip_bomb_is_refused_with_bounded_memory(corpus: dict[str, Case], tmp_path: Path) -> None:
    """The bomb claims 2 GiB; the refusal comes before that is ever held: peak RSS stays far below it."""
    case = corpus["gzip bomb (Kineto)"]
    probe = ("import resource, subprocess, sys\n"
             "done = subprocess.run([sys.executable, '-m', 'overlapscope', 'analyze', sys.argv[1]], "
             "capture_output=True, text=True)\n"
             "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    out = subprocess.run([sys.executable, "-c", probe, str(case.given)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "OVERLAPSCOPE_CACHE_DIR": str(tmp_path)})
    rc, max_rss_kib = (int(x) for x in out.stdout.split())
    assert rc == 3
    assert case.given.stat().st_size < 4 << 20  # a small file ...
    assert max_rss_kib * 1024 < 1 << 30, f"peak RSS {max_rss_kib / 1024:.0f} MiB"  # ... never unpacked whole


# --------------------------------------------------------------------------- diff (in process)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_diff_refuses_with_one_line(name: str, corpus: dict[str, Case], good: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    case = corpus[name]
    before = tree_digest(_case_root(case), good)
    for args in ([str(good), str(case.given)], [str(case.given), str(good)]):
        assert main(["diff", *args]) == 3
        captured = capsys.readouterr()
        line = one_error_line(captured.err, case)
        assert str(case.names) in line and case.problem in line, line
        assert captured.out == ""
    assert tree_digest(_case_root(case), good) == before


# --------------------------------------------------------------------------- run's analysis step


RUN_CASES = [n for n in CASE_NAMES if n not in ("folder without traces", "symlink loop", "named pipe as a trace",
                                                 "folder nested 1,000 deep")]  # no file a rank could write


@pytest.mark.parametrize("name", RUN_CASES)
def test_run_analysis_step_refuses_with_one_line(name: str, corpus: dict[str, Case], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The ranks "wrote" the bad files (a stand-in launcher copies them): `run` analyzes them and fails
    with exit 3 naming the file, after the run itself succeeded."""
    import shutil

    from runners import launch

    case = corpus[name]
    out = tmp_path / "run"

    def fake_run(algo: str, variant: str, *, out: Path, **_: object) -> launch.RunResult:
        out.mkdir(parents=True)
        for f in case.files:
            shutil.copy(f, out / f.name)
        manifest = {"status": "ok", "backend": "nccl", "traces": {}}
        (out / "manifest.json").write_text(json.dumps(manifest))
        return launch.RunResult(algo=algo, variant=variant, out_dir=out, manifest=manifest, traces={},
                                timings=launch.Timings(1.0, 1.0, 1.0, 1.0))

    monkeypatch.setattr(launch, "run", fake_run)
    assert case.files
    assert main(["run", "ag-gemm", "--variant", "baseline", "--out", str(out), "-f", "json"]) == 3
    captured = capsys.readouterr()
    line = one_error_line(captured.err, case)
    assert case.problem in line and (case.files[0].name in line or str(out) in line), line
    assert all((out / f.name).read_bytes() == f.read_bytes() for f in case.files)


# --------------------------------------------------------------------------- unreadable files


def test_unreadable_file(tmp_path: Path, good: Path, monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    """Permission denied. root reads anything, so there the denial is made by the OS call itself."""
    import shutil

    target = tmp_path / "rank0.json"
    shutil.copy(good, target)
    target.chmod(0)
    if os.geteuid() == 0:
        real_open = io.open

        def deny(file, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003 - io.open's own signature
            if isinstance(file, (str, os.PathLike)) and os.fspath(file) == str(target):
                raise PermissionError(13, "Permission denied", str(target))
            return real_open(file, *args, **kwargs)

        monkeypatch.setattr(io, "open", deny)  # pathlib opens through io.open
    for cmd in (["analyze", str(target)], ["diff", str(good), str(target)]):
        assert main(cmd) == 3
        line = capsys.readouterr().err.strip()
        assert line == f"overlapscope: error: {target}: cannot read file (Permission denied)", line
    target.chmod(0o644)


def test_a_good_trace_at_a_path_with_spaces_and_non_ascii_loads(tmp_path: Path, good: Path) -> None:
    odd = good_trace(tmp_path / "run ü é", "rank0 trace ✓.json")
    before = tree_digest(odd.parent)
    done = subprocess.run([sys.executable, "-m", "overlapscope", "analyze", str(odd), "-f", "json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["ranks"][0]["source"] == str(odd) and doc["ranks"][0]["compute_ns"] > 0
    assert tree_digest(odd.parent) == before


# --------------------------------------------------------------------------- the app


@pytest.fixture()
def bare_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, corpus: dict[str, Case]) -> Path:
    """The app with no samples, the corpus as its only allowed root."""
    from app import data

    empty = tmp_path / "no-samples"
    empty.mkdir()
    root = next(iter(corpus.values())).given.parents[1]
    monkeypatch.setenv(data.ENV_SAMPLES, str(empty))
    monkeypatch.setenv(data.ENV_ALLOWED_ROOTS, str(root))
    monkeypatch.delenv(data.ENV_APP_PATHS, raising=False)
    monkeypatch.delenv(data.ENV_MAX_UPLOAD_MB, raising=False)
    return root


@pytest.mark.parametrize("name", CASE_NAMES)
def test_app_shows_one_error_never_a_stack_trace(name: str, corpus: dict[str, Case], bare_app: Path) -> None:
    from streamlit.testing.v1 import AppTest

    from app import uploads
    from viz.safe_text import markdown_text

    case = corpus[name]
    before = tree_digest(_case_root(case))
    at = AppTest.from_file(MAIN, default_timeout=180)
    at.run()
    if case.uploadable:
        files = [(f.name, f.read_bytes(), "application/octet-stream") for f in case.files]
        at.sidebar.file_uploader[0].set_value(files if len(files) > 1 else files[0]).run()
        shown = [markdown_text(uploads.upload_name(f.name, set())) for f in case.files]
    else:
        at.sidebar.text_input(key="os_server_path").set_value(str(case.given))
        at.sidebar.button[0].click().run()
        shown = [markdown_text(case.names)]
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert len(errors) == 1, errors
    assert markdown_text(case.problem) in errors[0] and any(s in errors[0] for s in shown), errors  # escaped
    assert "Traceback" not in errors[0] and "\n" not in errors[0]
    assert tree_digest(_case_root(case)) == before


def test_wal_mode_export_is_read_without_a_trace_beside_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """An export left in WAL journal mode would grow -wal/-shm files on any ordinary open, even a
    read-only one; opened immutable, the folder stays exactly as it was."""
    import shutil
    import sqlite3

    from .bad_inputs import NSYS_SMALL

    path = tmp_path / "export" / "report.sqlite"
    path.parent.mkdir()
    shutil.copy(NSYS_SMALL, path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    conn.close()
    before = tree_digest(path.parent)
    assert main(["analyze", str(path), "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["ranks"]
    assert tree_digest(path.parent) == before  # no report.sqlite-wal, no report.sqlite-shm
