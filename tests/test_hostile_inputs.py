"""Hostile and careless inputs beyond the corpus: journals SQLite would apply, SQL names read from the
file, limits on work, option values, and outputs that would overwrite an input or cannot be written.

Every input is generated here; each check names what it guards against.
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from analyzers.errors import BadInputError
from analyzers.io.load import load_traces
from overlapscope.cli import main

from .bad_inputs import KINETO_RANK0, KINETO_RANK1, NSYS_SMALL, good_trace, kineto_doc
from .conftest import ROOT, tree_digest


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("OVERLAPSCOPE_CACHE_DIR", str(cache))
    return cache


def _one_line(err: str, prefix: str = "overlapscope: ") -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix) and "Traceback" not in err, err
    return lines[0]


def _cli(*args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "overlapscope", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **kwargs.pop("env", {})}, **kwargs)


def _kernels(path: Path) -> int:
    return sum(int((t.gpu["kind"] == "kernel").sum()) for t in load_traces([path]))


def _sqlite_kernels(path: Path) -> int:
    """What SQLite itself reads, from a copy (never the input) of the export and its journals."""
    copy = path.parent.parent / "sqlite-view"
    copy.mkdir()
    for f in path.parent.iterdir():
        shutil.copy(f, copy / f.name)
    with sqlite3.connect(copy / path.name) as conn:
        n = conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    conn.close()
    shutil.rmtree(copy)
    return n


# --------------------------------------------------------------------------- journals SQLite would apply


def _wal_export(tmp_path: Path) -> Path:
    """An export in WAL mode whose -wal holds a committed delete of every second kernel (the writer was
    killed before its checkpoint: the -wal is copied while the writer holds it open)."""
    work, given = tmp_path / "writer", tmp_path / "given"
    work.mkdir()
    given.mkdir()
    shutil.copy(NSYS_SMALL, work / "report.sqlite")
    conn = sqlite3.connect(work / "report.sqlite")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 2 = 0")
    conn.commit()
    for name in ("report.sqlite", "report.sqlite-wal"):
        shutil.copy(work / name, given / name)
    conn.close()
    return given / "report.sqlite"


def test_a_wal_with_committed_changes_is_read_as_sqlite_reads_it(tmp_path: Path, private_cache: Path) -> None:
    path = _wal_export(tmp_path)
    before = tree_digest(path.parent)
    full = _kernels(NSYS_SMALL)
    seen = _kernels(path)
    assert seen == _sqlite_kernels(path) < full  # the committed delete counts: 10 of 19 kernels, not 19
    assert tree_digest(path.parent) == before  # no byte, mtime or -shm changed beside the input
    assert not list(private_cache.glob(".journal-*"))  # the private copy is gone


def test_a_hot_rollback_journal_is_rolled_back_in_a_copy(tmp_path: Path) -> None:
    """A writer killed mid-transaction leaves changed pages in the file and the old ones in -journal:
    SQLite rolls back before reading; so does the loader, on a copy."""
    work, given = tmp_path / "writer", tmp_path / "given"
    work.mkdir()
    given.mkdir()
    shutil.copy(NSYS_SMALL, work / "report.sqlite")
    conn = sqlite3.connect(work / "report.sqlite", isolation_level=None)
    conn.execute("PRAGMA cache_size=1")  # spill the changed pages into the file before the commit
    conn.execute("BEGIN")
    conn.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
    for name in ("report.sqlite", "report.sqlite-journal"):
        shutil.copy(work / name, given / name)
    conn.execute("ROLLBACK")
    conn.close()
    path = given / "report.sqlite"
    before = tree_digest(given)
    assert _kernels(path) == _sqlite_kernels(path) == _kernels(NSYS_SMALL)
    assert tree_digest(given) == before


def test_the_parse_cache_sees_new_commits_in_the_wal(tmp_path: Path) -> None:
    from analyzers.io import parse_cache

    path = _wal_export(tmp_path)
    key = parse_cache.FileKey.of(path, None)
    (path.parent / "report.sqlite-wal").write_bytes((path.parent / "report.sqlite-wal").read_bytes() + b"\0" * 8)
    assert parse_cache.FileKey.of(path, None) != key


# --------------------------------------------------------------------------- SQL and names read from the file


RECURSIVE = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c ORDER BY x"


def test_a_table_name_is_never_pasted_into_sql(tmp_path: Path) -> None:
    """A process-environment table named to append an endless recursive query: quoted, it is only a name."""
    path = tmp_path / "report.sqlite"
    shutil.copy(NSYS_SMALL, path)
    with sqlite3.connect(path) as conn:
        conn.execute('CREATE TABLE "PROC_ENV" (globalPid INTEGER, name TEXT, value TEXT)')
        crafted = f"PROC_ENV, ({RECURSIVE})"
        conn.execute(f'CREATE TABLE "{crafted}" (globalPid INTEGER, name TEXT, value TEXT)')
        conn.execute(f'INSERT INTO "{crafted}" VALUES (1, \'RANK\', \'0\')')
    conn.close()
    done = _cli("analyze", str(path), "-f", "json", "--no-cache", timeout=60)
    assert done.returncode == 0, done.stderr
    clean = _cli("analyze", str(NSYS_SMALL), "-f", "json", "--no-cache", timeout=60)
    ours, theirs = json.loads(done.stdout)["ranks"], json.loads(clean.stdout)["ranks"]
    assert [(r["n_gpu"], r["compute_ns"]) for r in ours] == [(r["n_gpu"], r["compute_ns"]) for r in theirs]


def test_every_query_is_bounded_in_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from analyzers.io import nsys_schema

    monkeypatch.setattr(nsys_schema, "PROGRESS_STEPS", 1)
    monkeypatch.setenv(nsys_schema.ENV_SQL_SECONDS, "1e-9")
    with pytest.raises(BadInputError) as err:
        load_traces([NSYS_SMALL])
    assert "took longer than 1e-09 s" in str(err.value) and "OVERLAPSCOPE_SQL_SECONDS" in str(err.value)


# --------------------------------------------------------------------------- bounded work


def test_event_count_limit_is_documented_and_overridable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from analyzers.io import input_limits

    trace = good_trace(tmp_path)
    n = len(kineto_doc()["traceEvents"])
    monkeypatch.setenv(input_limits.ENV_MAX_EVENTS, str(n - 1))
    with pytest.raises(BadInputError, match=f"holds {n:,} events, over the {n - 1:,} limit"):
        load_traces([trace])
    monkeypatch.setenv(input_limits.ENV_MAX_EVENTS, str(n))
    assert load_traces([trace])
    # a small gzip of many events is counted before it is decoded
    monkeypatch.setattr(input_limits, "COUNT_FROM_BYTES", 1)
    monkeypatch.setenv(input_limits.ENV_MAX_EVENTS, "10")
    with pytest.raises(input_limits.InputLimitError, match="over the 10 limit"):
        input_limits.check_event_bytes(gzip.decompress(KINETO_RANK0.read_bytes()))


def test_file_count_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(3):
        doc = kineto_doc(KINETO_RANK0 if i % 2 == 0 else KINETO_RANK1)
        doc["distributedInfo"].update(rank=i, world_size=3)
        (tmp_path / f"rank{i}.json").write_text(json.dumps(doc))
    monkeypatch.setenv("OVERLAPSCOPE_MAX_FILES", "2")
    with pytest.raises(BadInputError, match="3 trace files, over the 2 limit"):
        load_traces([tmp_path])


def _peak_rss_of(args: list[str]) -> tuple[int, str, int]:
    probe = ("import resource, subprocess, sys\n"
             "done = subprocess.run([sys.executable, '-m', 'overlapscope', *sys.argv[1:]], capture_output=True, "
             "text=True, timeout=120)\n"
             "sys.stderr.write(done.stderr)\n"
             "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    out = subprocess.run([sys.executable, "-c", probe, *args], cwd=ROOT, capture_output=True, text=True, timeout=180)
    rc, rss_kib = (int(x) for x in out.stdout.split())
    return rc, out.stderr, rss_kib * 1024


def test_a_4gb_sparse_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    sparse = tmp_path / "rank0.json"
    with sparse.open("wb") as fh:
        fh.write(b'{"traceEvents": [')
        fh.truncate(4 << 30)
    rc, err, rss = _peak_rss_of(["analyze", str(sparse), "--no-cache"])
    assert rc == 3 and "not valid JSON" in _one_line(err)
    assert rss < 1 << 30, f"peak RSS {rss >> 20} MiB"


def test_a_huge_steps_range_is_checked_against_the_trace(tmp_path: Path) -> None:
    trace = good_trace(tmp_path)
    rc, err, rss = _peak_rss_of(["analyze", str(trace), "--no-cache", "--steps", "0-2000000000"])
    assert rc == 2 and "step 0, 4-2000000000 not in" in _one_line(err) and "steps present: 1-3" in err
    assert rss < 1 << 30, f"peak RSS {rss >> 20} MiB"


def test_more_jobs_than_open_files_allow_still_answer(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for i in range(4):
        doc = kineto_doc(KINETO_RANK0 if i % 2 == 0 else KINETO_RANK1)
        doc["distributedInfo"].update(rank=i, world_size=4)
        good_trace(run, f"rank{i}.json").write_text(json.dumps(doc))

    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (24, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    many = _cli("analyze", str(run), "-f", "json", "--no-cache", "-j", "16", preexec_fn=few_files)
    one = _cli("analyze", str(run), "-f", "json", "--no-cache", "-j", "1")
    assert many.returncode == one.returncode == 0, many.stderr
    assert json.loads(many.stdout)["ranks"] == json.loads(one.stdout)["ranks"]


# --------------------------------------------------------------------------- option values


@pytest.mark.parametrize(("args", "problem"), [
    (["--comm-kernel", ""], "--comm-kernel: an empty name matches every kernel"),
    (["--comm-kernel", "  "], "--comm-kernel: an empty name matches every kernel"),
    (["--fail-under-overlap", "nan"], "--fail-under-overlap nan"),
    (["--fail-under-overlap", "inf"], "--fail-under-overlap inf"),
    (["--fail-under-overlap", "-1"], "--fail-under-overlap -1"),
    (["--fail-under-overlap", "101"], "--fail-under-overlap 101"),
    (["--step-pattern", "("], "--step-pattern '(': not a valid regex"),
    (["--step-pattern", ""], "--step-pattern: empty"),
    (["--steps", "99999999999999999999999"], "is too large"),
    (["--scheduler", "tcp://::::nope"], "not a scheduler address"),
    (["--scheduler", "nope"], "not a scheduler address"),
    (["--rank", str(2**64)], "Invalid value for '--rank'"),
    (["--rank", "-1"], "Invalid value for '--rank'"),
    (["--jobs", "0"], "Invalid value for '--jobs'"),
    (["--jobs", str(10**30)], "Invalid value for '--jobs'"),
])
def test_bad_option_values_are_one_usage_line(args: list[str], problem: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    trace = good_trace(tmp_path)
    assert main(["analyze", str(trace), "--no-cache", *args]) == 2
    captured = capsys.readouterr()
    assert problem in _one_line(captured.err, "overlapscope: usage error: ") and captured.out == ""


@pytest.mark.parametrize(("args", "problem"), [
    (["--timeout", "nan"], "nan is not a number of seconds"),
    (["--timeout", "inf"], "Invalid value for '--timeout'"),
    (["--timeout", "-5"], "Invalid value for '--timeout'"),
    (["--nproc", "0"], "Invalid value for '--nproc'"),
    (["--nproc", str(2**70)], "Invalid value for '--nproc'"),
])
def test_bad_run_option_values_are_one_usage_line_before_any_run(args: list[str], problem: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("run", "sweep"):
        assert main([command, "ag-gemm", *args]) == 2
        captured = capsys.readouterr()
        assert problem in _one_line(captured.err, "overlapscope: usage error: ") and captured.out == ""


def test_sweep_refuses_csv_before_any_run(capsys: pytest.CaptureFixture[str]) -> None:
    """Its comparison has no CSV form (as whatif's): -f csv is a usage error, not a table in its place."""
    assert main(["sweep", "ag-gemm", "-f", "csv"]) == 2
    captured = capsys.readouterr()
    assert "sweep writes table, json or md" in _one_line(captured.err, "overlapscope: usage error: ")
    assert captured.out == ""


@pytest.mark.parametrize("pattern", ["", "   "])
def test_a_rules_file_with_an_empty_pattern_is_refused(pattern: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """As an empty --comm-kernel, an empty rule pattern would put every kernel in its category."""
    rules = tmp_path / "rules.toml"
    rules.write_text(f'[[rule]]\npattern = "{pattern}"\ncategory = "comm"\n')
    assert main(["analyze", str(good_trace(tmp_path)), "--rules", str(rules), "--no-cache"]) == 3
    assert "rule #1 is invalid (an empty pattern matches every kernel)" in _one_line(capsys.readouterr().err)


def test_a_malformed_scheduler_in_the_environment_is_one_line(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OVERLAPSCOPE_SCHEDULER", "::")
    assert main(["analyze", str(good_trace(tmp_path)), "--no-cache"]) == 2
    assert "$OVERLAPSCOPE_SCHEDULER '::': not a scheduler address" in _one_line(capsys.readouterr().err)


def test_a_malformed_scheduler_is_refused_where_the_report_cache_holds_the_answer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The scheduler is no part of the report cache's key: it is checked before the cache is read."""
    monkeypatch.setenv("OVERLAPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    trace = good_trace(tmp_path)
    assert main(["analyze", str(trace), "-f", "json"]) == 0
    capsys.readouterr()
    assert main(["analyze", str(trace), "-f", "json"]) == 0  # answered from the report cache
    assert capsys.readouterr().out
    assert main(["analyze", str(trace), "-f", "json", "--scheduler", "nope"]) == 2
    captured = capsys.readouterr()
    assert "not a scheduler address" in _one_line(captured.err, "overlapscope: usage error: ")
    assert captured.out == ""


# --------------------------------------------------------------------------- outputs


def test_an_output_is_never_an_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = good_trace(tmp_path)
    (tmp_path / "link.json").symlink_to(trace)
    os.link(trace, tmp_path / "hard.json")
    before = tree_digest(tmp_path)
    for out in (trace, tmp_path / "link.json", tmp_path / "hard.json"):
        assert main(["export", str(trace), "--perfetto", str(out), "--overwrite"]) == 2
        assert "is an input of this command" in _one_line(capsys.readouterr().err)
        assert main(["diff", str(trace), str(trace), "--html", str(out), "--overwrite"]) == 2
        assert "is an input of this command" in _one_line(capsys.readouterr().err)
    assert tree_digest(tmp_path) == before


def test_an_output_that_is_a_device_is_refused_before_any_work(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    trace = good_trace(tmp_path)
    (tmp_path / "full.json").symlink_to("/dev/full")
    assert main(["export", str(trace), "--perfetto", str(tmp_path / "full.json"), "--overwrite"]) == 2
    assert "not a regular file" in _one_line(capsys.readouterr().err)


def test_an_output_that_cannot_be_written_is_one_line_and_leaves_nothing(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """/proc takes no new files, even from root (whom a folder's mode bits do not stop)."""
    trace = good_trace(tmp_path)
    out = Path("/proc/overlapscope-test.json")
    assert main(["export", str(trace), "--perfetto", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(out) in line and ("not writable" in line or "cannot write" in line)
    assert not out.exists()


@pytest.mark.parametrize("args", [["analyze", "-f", "json"], ["analyze"], ["diff"]])
def test_standard_output_on_a_full_disk_is_one_line(args: list[str], tmp_path: Path) -> None:
    trace = str(good_trace(tmp_path))
    files = [trace, trace] if args[0] == "diff" else [trace]
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "overlapscope", args[0], *files, *args[1:]], cwd=ROOT,
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 2
    assert "standard output: cannot write (No space left on device)" in _one_line(done.stderr)
