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


# --------------------------------------------------------------------------- per-step work: all windows at once
def _random_rows(rng: np.random.Generator, n: int, n_windows: int):
    from analyzers.overlap.rows import GpuRows

    s = rng.integers(0, 10_000, n)
    dur = np.where(rng.random(n) < 0.1, 0, rng.integers(1, 400, n))
    dur[rng.random(n) < 0.03] = rng.integers(2_000, 9_000)  # a few long ones (past the 99th percentile)
    e = s + dur
    cat = rng.integers(0, 3, n)
    rows = GpuRows(s.astype(np.int64), e.astype(np.int64), rng.integers(0, 3, n), np.zeros(n, dtype=np.int64),
                   cat == 0, cat == 1)
    cuts = np.sort(rng.choice(np.arange(1, 10_000), n_windows * 2, replace=False)).reshape(-1, 2)
    if rng.random() < 0.5:  # overlapping windows too
        cuts[:, 1] = np.minimum(cuts[:, 1] + rng.integers(0, 3_000, len(cuts)), 10_000)
    return rows, cuts[:, 0].astype(np.int64), cuts[:, 1].astype(np.int64)


@pytest.mark.parametrize("seed", range(40))
def test_window_pairs_are_exactly_the_overlapping_rows(seed: int):
    from analyzers.timeline.grouped_intervals import window_pairs

    rng = np.random.default_rng(seed)
    rows, lo, hi = _random_rows(rng, int(rng.integers(1, 300)), int(rng.integers(1, 30)))
    for points in (False, True):
        w, r = window_pairs(rows.s, rows.e, lo, hi, points=points)
        want = [(i, j) for i in range(lo.size) for j in range(rows.s.size)
                if (rows.e[j] > lo[i] and rows.s[j] < hi[i])
                or (points and rows.s[j] == rows.e[j] and lo[i] <= rows.s[j] < hi[i])]
        assert list(zip(w.tolist(), r.tolist(), strict=True)) == want


@pytest.mark.parametrize("seed", range(40))
def test_iteration_table_equals_the_window_by_window_metrics(seed: int):
    import pandas as pd

    from analyzers.overlap.metrics import _window_metrics
    from analyzers.overlap.window_table import iteration_table

    rng = np.random.default_rng(seed)
    rows, lo, hi = _random_rows(rng, int(rng.integers(0, 300)), int(rng.integers(1, 30)))
    windows = pd.DataFrame({"step": np.arange(lo.size), "name": [f"s{i}" for i in range(lo.size)],
                            "gpu_start_ns": lo, "gpu_end_ns": hi})
    want = pd.DataFrame([{"step": i, "name": f"s{i}", **_window_metrics(rows, int(lo[i]), int(hi[i])).to_dict()}
                         for i in range(lo.size)])  # what the window-by-window loop built
    pd.testing.assert_frame_equal(iteration_table(rows, windows), want, check_exact=True)


def test_iteration_table_equals_the_window_by_window_metrics_on_every_sample():
    import pandas as pd

    from analyzers.io.load import load_traces
    from analyzers.overlap.metrics import _window_metrics
    from analyzers.overlap.rows import GpuRows
    from analyzers.overlap.window_table import iteration_table
    from analyzers.timeline.iterations import gpu_step_windows

    for run in sorted((ROOT / "sample_traces").glob("*/*/")):
        for t in load_traces([run], cache=False):
            windows = gpu_step_windows(t)
            if windows.empty:
                continue
            rows = GpuRows.of(t.gpu)
            want = pd.DataFrame([{"step": int(st), "name": nm, **_window_metrics(rows, int(lo), int(hi)).to_dict()}
                                 for st, nm, lo, hi in zip(windows["step"], windows["name"], windows["gpu_start_ns"],
                                                           windows["gpu_end_ns"], strict=True)])
            pd.testing.assert_frame_equal(iteration_table(rows, windows), want, check_exact=True, obj=str(run))


def _front_rows_window_by_window(view) -> list[dict]:
    """The front-loaded detector's per-(window, device) rows as it made them one window at a time: the
    oracle the all-windows version must equal."""
    from analyzers.findings.view import comm_kind_numbered
    from analyzers.timeline import intervals as iv

    def time_reaching(ms, me, amount):
        cum = np.cumsum(me - ms)
        i = min(int(np.searchsorted(cum, amount, side="left")), ms.size - 1)
        return int(ms[i] + max(amount - (cum[i - 1] if i > 0 else 0), 0))

    p = view.params
    kinds, kind_names = comm_kind_numbered(view)
    kind_names = np.r_[kind_names, np.nan]
    rows = []
    for w in view.window_list():
        lo, hi = int(w.lo), int(w.hi)
        for d in view.devices():
            on = view.in_range(lo, hi) & (view.device == d)
            cm, cp = on & view.comm, on & view.compute
            if not cm.any() or not cp.any():
                continue
            ps, pe = iv.union(np.clip(view.s[cp], lo, hi), np.clip(view.e[cp], lo, hi))
            if ps.size == 0:
                continue
            c_start = time_reaching(ps, pe, p.front_compute_start_share * iv.length((ps, pe)))
            all_before = iv.length(iv.clip(*iv.union(view.s[cm], view.e[cm]), lo, c_start))
            best = None
            for code in np.unique(kinds[cm]):
                km = cm & (kinds == code)
                ks, ke = iv.union(np.clip(view.s[km], lo, hi), np.clip(view.e[km], lo, hi))
                total, before = iv.length((ks, ke)), iv.length(iv.clip(ks, ke, lo, c_start))
                n_before = int((view.s[km] < c_start).sum())
                share = before / total if total else 0.0
                cand = {"kind": str(kind_names[code]), "share": share, "n_before": n_before, "n_kind": int(km.sum()),
                        "before_ns": before, "kind_ns": total}
                if best is None or share > best["share"]:
                    best = cand
                if share >= p.front_min_share and n_before >= p.front_min_collectives:
                    best = cand
                    break
            front = (best["share"] >= p.front_min_share and best["n_before"] >= p.front_min_collectives
                     and c_start - lo >= p.front_min_window_share * (hi - lo)
                     and all_before >= p.front_min_comm_share * (hi - lo))
            rows.append({"step": int(w.step), "lo": lo, "hi": hi, "compute_start_ns": c_start,
                         "comm_before_ns": all_before, "front": front, **best})
    return rows


def test_front_loaded_rows_of_all_windows_at_once_equal_the_window_by_window_ones():
    from analyzers.findings.front_loaded_collectives import _window_rows
    from analyzers.findings.registry import FindingParams
    from analyzers.findings.view import RankView, windows_of
    from analyzers.io.load import load_traces

    checked = 0
    for run in sorted((ROOT / "sample_traces").glob("*/*/")):
        for t in load_traces([run], cache=False):
            view = RankView(t, FindingParams(), windows_of(t, None, FindingParams().step_pattern))
            want = _front_rows_window_by_window(view)
            got = _window_rows(view)
            assert len(got) == len(want), run
            for a, b in zip(got, want, strict=True):
                assert a.keys() == b.keys() and all(a[k] == pytest.approx(b[k], rel=1e-12) if isinstance(b[k], float)
                                                    else a[k] == b[k] for k in b), (run, a, b)
            checked += len(want)
    assert checked > 100


# --------------------------------------------------------------------------- one long name on many rows
def test_one_long_name_shared_by_many_nsys_rows_stays_one_string(tmp_path: Path):
    from tests.hostile_corpus import NCCL, write_nsys

    huge = "k" * (1 << 20)  # 1 MB, one StringIds row, named by 1,200 kernels
    rows = [{"start": 10_000_000 + i * 1000, "end": 10_000_500 + i * 1000, "name_id": 1} for i in range(1200)]
    rows.append({"start": 10_000_100, "end": 10_000_900, "name_id": 2, "stream": 8})
    path = write_nsys(tmp_path / "rank0.sqlite", rows, {1: huge, 2: NCCL})
    assert path.stat().st_size < 4 << 20
    # the peak of the command alone: measured in a fresh parent that runs only it
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "sys.stderr.write(r.stderr); sys.stdout.write(r.stdout); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(r.returncode)")
    import os

    r = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "overlapscope", "analyze", str(path),
                        "--no-cache", "-f", "json"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OVERLAPSCOPE_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr[-2000:]
    peak_mb = int(r.stderr.strip().splitlines()[-1]) / 1024
    doc = __import__("json").loads(r.stdout)
    assert doc["ranks"][0]["n_compute"] == 1200
    # the rows share the one string: a few copies of 1 MB, not one per row (3.5 GB before)
    assert peak_mb < 1200, f"{peak_mb:.0f} MB"


def _in_a_thread(fn):
    """fn() run off the main thread (as in a Dask worker or the app's script thread): its result or error."""
    import threading

    box: dict = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join(60)
    assert not t.is_alive(), "the pattern ran unbounded off the main thread"
    return box


@pytest.mark.parametrize("pattern", [*EVIL_PATTERNS, r"(a|aa)+$"])
def test_off_the_main_thread_every_pattern_is_bounded_too(pattern: str, monkeypatch):
    monkeypatch.setenv(user_regex.ENV_REGEX_SECONDS, "0.5")
    t = time.monotonic()
    box = _in_a_thread(lambda: user_regex.search_each(pattern, ["ok", "a" * 60 + "!"], "--step-pattern"))
    assert time.monotonic() - t < 10
    if "error" in box:  # the regex engine's own timeout, the same one line as under the timer
        assert isinstance(box["error"], OptionValueError) and "backtracks" in str(box["error"])
    if pattern == r"(a|aa)+$":  # no engine answers this one in time: it must be stopped
        assert "error" in box


def test_off_the_main_thread_a_legitimate_pattern_finds_the_same_names():
    names = [f"ProfilerStep#{i}" for i in range(5_000)] + ["aten::mm", "ProfilerStep#x"]
    pattern = r"^ProfilerStep\s*#\s*(\d+)$"
    box = _in_a_thread(lambda: user_regex.search_each(pattern, names, "--step-pattern"))
    assert box["value"].tolist() == user_regex.search_each(pattern, names, "--step-pattern").tolist()
    assert box["value"].sum() == 5_000
