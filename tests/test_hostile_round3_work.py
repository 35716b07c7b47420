"""Round three of hostile input, unbounded work: user regexes that backtrack without end are stopped by
a time bound (one line, exit 2), whatever option brought them and whatever name they meet."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from analyzers.errors import OptionValueError
from analyzers.timeline import user_regex
from tests.trace_files import NCCL_ALLREDUCE, Kineto

ROOT = Path(__file__).resolve().parents[1]
# Patterns that backtrack exponentially on a run of one letter that then fails to match
EVIL_PATTERNS = ["(a+)+$", "(a|aa)+$", "(a|a?)+$", "^(a+)*b", "(.*a){25}x", "(?:a*)*c"]


def cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-m", "overlapscope", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def _evil_run(folder: Path, ranks: int = 1, length: int = 37) -> Path:
    """A run whose host op and kernel names are `length - 1` a's and a '!': a match that must fail."""
    folder.mkdir(parents=True, exist_ok=True)
    evil = "a" * (length - 1) + "!"
    for r in range(ranks):
        k = Kineto(rank=r, world_size=ranks)
        for s in range(3):
            b = s * 1000
            k.step(s, b, b + 900)
            k.op(evil, b + 10, b + 20)
            k.kernel(b + 100, b + 300, evil, launch=b + 50)
            k.kernel(b + 200, b + 400, NCCL_ALLREDUCE, launch=b + 60, stream=8)
        k.write(folder / f"rank{r}.json")
    return folder


def _refused(r: subprocess.CompletedProcess, what: str) -> None:
    assert r.returncode == 2, r.stdout[-500:] + r.stderr
    assert r.stderr.strip().count("\n") == 0 and what in r.stderr and "backtracks" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("pattern", EVIL_PATTERNS)
def test_search_each_stops_a_pattern_that_backtracks_without_end(pattern: str, monkeypatch):
    monkeypatch.setenv(user_regex.ENV_REGEX_SECONDS, "0.5")
    t = time.monotonic()
    with pytest.raises(OptionValueError, match="backtracks"):
        user_regex.search_each(pattern, ["ok", "a" * 36 + "!"], "--step-pattern")
    assert time.monotonic() - t < 10


def test_a_legitimate_pattern_runs_over_many_names_inside_the_bound():
    names = [f"ProfilerStep#{i}" for i in range(50_000)] + ["aten::mm"] * 10
    hit = user_regex.search_each(r"^ProfilerStep\s*#\s*(\d+)$", names, "--step-pattern")
    assert hit.sum() == 50_000 and not hit[-10:].any()


def test_an_earlier_timer_is_given_back():
    import signal

    signal.setitimer(signal.ITIMER_REAL, 100)
    try:
        user_regex.search_each("x", ["x", "y"], "test")
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        assert 90 < left <= 100
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_step_pattern_that_backtracks_is_one_line_exit_2(tmp_path: Path, jobs: str):
    run = _evil_run(tmp_path / "run", ranks=2)
    r = cli("analyze", run, "--step-pattern", "(a+)+$", "--no-cache", "--jobs", jobs,
            env={user_regex.ENV_REGEX_SECONDS: "1"})
    _refused(r, "--step-pattern")


def test_rules_pattern_that_backtracks_is_one_line_exit_2(tmp_path: Path):
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\npattern = "(a|aa)+$"\ncategory = "comm"\n')
    r = cli("analyze", _evil_run(tmp_path / "run"), "--rules", rules, "--no-cache",
            env={user_regex.ENV_REGEX_SECONDS: "1"})
    _refused(r, "classification rule")


def test_fix_drop_pattern_that_backtracks_is_one_line_exit_2(tmp_path: Path):
    r = cli("whatif", _evil_run(tmp_path / "run"), "--fix", "drop=^(a+)*b", "--no-cache",
            env={user_regex.ENV_REGEX_SECONDS: "1"})
    _refused(r, "--fix drop=")


def test_the_same_patterns_on_names_they_match_quickly_still_work(tmp_path: Path):
    run = _evil_run(tmp_path / "run", length=8)  # 7 a's: the backtracking is 2^7 steps, nothing
    r = cli("whatif", run, "--fix", "drop=(a+)+$", "--no-cache", "-f", "json")
    assert r.returncode == 0, r.stderr
    assert np.isfinite(float(__import__("json").loads(r.stdout)["saving_ns"]))


def _children(pid: int) -> set[int]:
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.add(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_pool_workers_end_when_analyze_is_killed(tmp_path: Path):
    import os
    import signal

    run = _evil_run(tmp_path / "run", ranks=2)
    proc = subprocess.Popen([sys.executable, "-m", "overlapscope", "analyze", str(run), "--jobs", "2", "--no-cache",
                             "--step-pattern", "(a+)+$"], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, user_regex.ENV_REGEX_SECONDS: "120"})
    try:
        deadline = time.monotonic() + 60
        workers: set[int] = set()
        while time.monotonic() < deadline and len(workers) < 2:  # both workers busy in the endless match
            time.sleep(0.2)
            workers = _children(proc.pid)
        assert len(workers) >= 2, "the pool never started"
        time.sleep(1.0)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.1)
        assert not any(_alive(w) for w in workers), "pool workers outlived the killed command"
    finally:
        if proc.poll() is None:
            proc.kill()
