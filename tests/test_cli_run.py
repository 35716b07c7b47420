"""`overlapscope run` / `sweep` on CPU (gloo): the CLI runs, analyzes, and fails with exit 4 naming the rank.

The first run and every failure go through torchrun; the other runs' ranks are forked from the test process
(tests/forked_ranks.py), which imported torch once."""

from __future__ import annotations

import gzip
import json
import subprocess
import time
from pathlib import Path

import pytest

from .conftest import ROOT
from .forked_ranks import forked_ranks, ranks_forked  # noqa: F401 - a fixture
from .inprocess import cli  # the command in this process: each test waits for torchrun's ranks, not a CLI start too


def test_run_writes_traces_and_prints_analysis(tmp_path):
    out = tmp_path / "run"
    r = cli("run", "ag-gemm", "--variant", "host-sync", "--out", str(out), "-f", "json", "M=64", "K=32", "N=16")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [x["rank"] for x in doc["ranks"]] == [0, 1]
    assert doc["timings_ms"]["variant_ms"] > 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["variant"] == "host-sync" and manifest["params"]["M"] == 64
    # each rank's trace and, beside it, its Execution Trace of one step (runners/profiling.py), which the
    # analysis leaves out of the run's traces
    assert sorted(p.name for p in out.glob("rank*.json.gz")) == ["rank0.et.json.gz", "rank0.json.gz",
                                                               "rank1.et.json.gz", "rank1.json.gz"]
    assert json.loads(gzip.decompress((out / "rank1.et.json.gz").read_bytes()))["nodes"]


@pytest.fixture(scope="module")
def over_an_earlier_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """One launch serving two tests: `--out run --overwrite` from another directory, where ./run holds an
    earlier run's manifest, a rank file the new run does not write, and a file of the user's."""
    caller = tmp_path_factory.mktemp("caller")
    out = caller / "run"
    out.mkdir()
    (out / "manifest.json").write_text('{"status": "ok", "variant": "old"}')
    (out / "rank2.json.gz").write_bytes(b"a rank of an earlier 3-rank run")
    (out / "notes.txt").write_text("mine")
    with ranks_forked():
        r = cli("run", "ag-gemm", "--variant", "baseline", "--out", "run", "--profiler", "none", "--overwrite",
                "-f", "json", "M=64", "K=32", "N=16", cwd=caller)
    return out, r


def test_relative_out_is_the_callers_directory(over_an_earlier_run):
    """The ranks run in the repository root; `--out run` still means ./run of the caller."""
    out, r = over_an_earlier_run
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "manifest.json").read_text())["variant"] == "baseline"
    assert not (ROOT / "run").exists()


def test_failed_rank_exits_4_and_names_it(tmp_path):
    """A rank raising in the timed loop: exit 4, the rank and its error named, the failed manifest and the
    launcher's log kept (launch.run raises RunFailed naming the rank; this is its only launch in the suite)."""
    out = tmp_path / "fail"
    r = cli("run", "gemm-rs", "--variant", "ring", "--out", str(out), "--profiler", "none",
            "M=64", "K=32", "N=16", "fail_rank=1", "fail_phase=timing")
    assert r.returncode == 4
    assert "rank 1 failed" in r.stderr and "injected failure" in r.stderr
    assert str(out) in r.stderr and "Traceback" not in r.stderr
    failed = json.loads((out / "manifest.failed.json").read_text())
    assert failed["status"] == "failed" and failed["failed_rank"] == 1
    assert (out / "launch.log").is_file()


@pytest.mark.usefixtures("forked_ranks")
def test_sweep_compares_variants(tmp_path):
    r = cli("sweep", "gemm-rs", "--variants", "baseline,ring", "--out", str(tmp_path / "sweep"), "-f", "json",
            "--profiler", "none", "iters=10")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc["timings_ms"]) == {"baseline", "ring"}
    assert [(g["workload"], g["baseline"]) for g in doc["groups"]] == [("matmul + reduce-scatter", "baseline")]
    assert json.loads((tmp_path / "sweep" / "sweep.json").read_text()) == doc
    t = doc["timings_ms"]["ring"]
    assert t["variant_spread_ms"] >= 0 and t["compute_spread_ms"] >= 0  # iters=10: two chunks of 5


@pytest.mark.usefixtures("forked_ranks")
def test_sweep_compares_each_workload_with_its_own_baseline(tmp_path, monkeypatch):
    """symm-mem runs two computations: the all-gather+matmul is not the reduce-scatter's baseline."""
    monkeypatch.setenv("COLUMNS", "250")  # table titles on one line
    r = cli("sweep", "symm-mem", "--variants", "fused-ag-matmul,fused-matmul-rs,two-stream", "--out",
            str(tmp_path / "s"), "--profiler", "torch", "iters=2", "profile_steps=1")
    assert r.returncode == 0, r.stderr
    assert "all-gather + matmul, baseline fused-ag-matmul" in r.stdout
    assert "matmul + reduce-scatter, baseline fused-matmul-rs" in r.stdout
    doc = json.loads((tmp_path / "s" / "sweep.json").read_text())
    groups = {g["workload"]: (g["baseline"], [v["variant"] for v in g["variants"]]) for g in doc["groups"]}
    assert groups == {"all-gather + matmul": ("fused-ag-matmul", ["fused-ag-matmul"]),
                      "matmul + reduce-scatter": ("fused-matmul-rs", ["fused-matmul-rs", "two-stream"])}


# --------------------------------------------------------------------------- faults


def test_hung_rank_ends_the_run_within_the_timeout_and_is_named(tmp_path):
    out = tmp_path / "hang"
    t0 = time.monotonic()
    # start-up to 'check' is 4.6 s at load 2.5 (~8 s at CI's load 5): a 15 s timeout leaves 2x that margin,
    # and "waiting in 'check'" shows the hang came after start-up
    r = cli("run", "ag-gemm", "--variant", "baseline", "--out", str(out), "--profiler", "none", "--timeout", "15",
            "M=64", "K=32", "N=16", "hang_rank=1", "hang_phase=check")
    wall = time.monotonic() - t0
    assert r.returncode == 4, r.stderr
    assert "timed out after 15 s" in r.stderr and "rank 1" in r.stderr and "hung" in r.stderr
    assert "rank 0 waiting in 'check'" in r.stderr
    assert "Traceback" not in r.stderr and str(out) in r.stderr
    assert wall < 15 + launch_grace() + 30, wall  # the timeout, the kill grace, start-up of the CLI itself
    assert (out / "rank0.status.json").is_file()  # partial outputs are kept
    assert json.loads((out / "manifest.failed.json").read_text())["failed_rank"] == 1


def test_killed_rank_is_named_not_the_survivor(tmp_path):
    """A rank killed by a signal (the OOM killer, a lost node) writes no error file; the survivor then
    fails on a broken connection. The run must name the killed rank."""
    out = tmp_path / "kill"
    r = cli("run", "ag-gemm", "--variant", "baseline", "--out", str(out), "--profiler", "none", "--timeout", "120",
            "M=64", "K=32", "N=16", "kill_rank=1", "kill_phase=check")
    assert r.returncode == 4, r.stderr
    line = next(x for x in r.stderr.splitlines() if x.startswith("overlapscope: run failed:"))
    assert "rank 1 was killed by SIGKILL" in line and "Traceback" not in r.stderr
    failed = json.loads((out / "manifest.failed.json").read_text())
    assert failed["failed_rank"] == 1
    assert (out / "rank1.status.json").is_file() and (out / "launch.log").is_file()  # what was written stays


def test_abort_in_teardown_after_every_rank_finished_is_a_warning(tmp_path):
    """A rank that aborts after every rank passed the final barrier (gloo throwing on a closed socket
    at teardown) loses no measurement: the run succeeds, and its manifest names the crash."""
    out = tmp_path / "teardown"
    r = cli("run", "ag-gemm", "--variant", "baseline", "--out", str(out), "--profiler", "none", "--timeout", "120",
            "M=64", "K=32", "N=16", "abort_rank=1", "abort_phase=exit")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert "rank 1 ended with SIGABRT in process-group teardown" in manifest["launch_warning"]
    assert not (out / "manifest.failed.json").exists()


def test_abort_before_every_rank_is_past_the_final_barrier_still_fails(tmp_path):
    """The look-alike: an abort before this rank knows every peer is past the final barrier (a peer may
    still need it) is a failed run naming the rank, as any death is."""
    out = tmp_path / "abort-done"
    r = cli("run", "ag-gemm", "--variant", "baseline", "--out", str(out), "--profiler", "none", "--timeout", "120",
            "M=64", "K=32", "N=16", "abort_rank=1", "abort_phase=finished")
    assert r.returncode == 4, r.stderr
    line = next(x for x in r.stderr.splitlines() if x.startswith("overlapscope: run failed:"))
    assert "rank 1 was killed by SIGABRT" in line
    assert json.loads((out / "manifest.failed.json").read_text())["failed_rank"] == 1


def launch_grace() -> float:
    from runners.launch import KILL_GRACE_S

    return KILL_GRACE_S


# --------------------------------------------------------------------------- outputs never clobbered


def test_run_refuses_a_folder_holding_a_run(tmp_path):
    out = tmp_path / "earlier"
    out.mkdir()
    (out / "manifest.json").write_text('{"status": "ok"}')
    (out / "rank0.json.gz").write_bytes(b"earlier trace")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    r = cli("run", "ag-gemm", "--variant", "baseline", "--out", str(out), "--profiler", "none")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and str(out) in r.stderr and "already holds a run" in r.stderr
    assert "--overwrite" in r.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_sweep_refuses_a_variant_folder_holding_a_run(tmp_path):
    (tmp_path / "ring").mkdir()
    (tmp_path / "ring" / "manifest.json").write_text("{}")
    r = cli("sweep", "gemm-rs", "--variants", "ring", "--out", str(tmp_path), "--profiler", "none")
    assert r.returncode == 2 and str(tmp_path / "ring") in r.stderr and "already holds a run" in r.stderr


def test_overwrite_replaces_only_the_earlier_runs_files(over_an_earlier_run):
    out, r = over_an_earlier_run
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "manifest.json").read_text())["variant"] == "baseline"
    assert not (out / "rank2.json.gz").exists()  # would have mixed into the new run's analysis
    assert (out / "notes.txt").read_text() == "mine"


def test_runners_launch_refuses_a_folder_holding_a_run(tmp_path, capsys):
    """The GPU-host entry (python -m runners.launch, what the app's Run page starts) refuses it too."""
    (tmp_path / "baseline").mkdir()
    (tmp_path / "baseline" / "launch.log").write_text("earlier\n")
    from runners import launch  # imports no torch

    code = launch.main(["ag-gemm", "--variants", "baseline", "--nproc", "2", "--profiler", "none", "--out",
                        str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "already holds a run (launch.log)" in err, err
    assert (tmp_path / "baseline" / "launch.log").read_text() == "earlier\n"


@pytest.mark.usefixtures("forked_ranks")
def test_sweep_grid_tunes_and_times_every_shape(tmp_path, monkeypatch):
    """`sweep ALGO --grid FILE` on gloo: one row per shape with the schedule chosen and the criteria."""
    monkeypatch.setenv("OVERLAPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"ag-gemm": [{"M": 64, "K": 32, "N": 16, "steps": 2, "dtype": "fp32"},
                                            {"M": 128, "K": 16, "N": 32}]}))
    r = cli("sweep", "ag-gemm", "--grid", str(grid), "--out", str(tmp_path / "g"), "-f", "json", "iters=10")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc == json.loads((tmp_path / "g" / "grid.json").read_text()) and doc["world"] == 2
    assert [(row["M"], row["steps"], row["dtype"]) for row in doc["rows"]] == [(64, 2, "fp32"), (128, 4, "bf16")]
    for row in doc["rows"]:
        assert row["schedule"] and row["max_rel_error"] <= row["rel_error_bound"]
        ratio = row["tuned_ms"] / min(row["baseline_ms"], row["fused-ref_ms"])  # from the rounded medians
        assert abs(row["tuned_vs_best_ref"] - ratio) <= 1e-3 * ratio
    assert "| ag-gemm | 64 | 32 | 16 | 2 | fp32 |" in (tmp_path / "g" / "grid.md").read_text()


def test_bad_grid_file_is_one_line_and_exit_3(tmp_path):
    bad = tmp_path / "grid.json"
    for text, problem in [("{nope", "not a readable JSON grid file"), ('{"gemm-rs": []}', "no list of shapes"),
                          ('{"ag-gemm": [{"M": 64, "K": "x", "N": 4}]}', "expected int, got 'x'"),
                          ('{"ag-gemm": [{"M": 64, "N": 4}]}', "expected M, K, N")]:
        bad.write_text(text)
        r = cli("sweep", "ag-gemm", "--grid", str(bad), "--out", str(tmp_path / "never"))
        assert r.returncode == 3, (text, r.stderr)
        assert str(bad) in r.stderr and problem in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "never").exists()


@pytest.mark.usefixtures("forked_ranks")
def test_retune_searches_again_and_is_in_the_reproduce_line(tmp_path, monkeypatch):
    monkeypatch.setenv("OVERLAPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "t"
    r = cli("run", "gemm-rs", "--variant", "tuned", "--retune", "--profiler", "none", "--out", str(out), "-f", "json",
            "M=64", "K=32", "N=16")
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["tuning"]["source"] == "search" and m["tuning"]["cache_status"] == "retune"
    assert m["launch"]["reproduce"] == ("overlapscope run gemm-rs --variant tuned --profiler none M=64 K=32 N=16 "
                                        "tune=retune")
    assert cli("run", "gemm-rs", "--retune", "tune=off").returncode == 2


@pytest.mark.usefixtures("forked_ranks")
def test_sweep_records_how_tuned_chose_its_schedule(tmp_path, monkeypatch):
    monkeypatch.setenv("OVERLAPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    r = cli("sweep", "gemm-rs", "--variants", "baseline,tuned", "--out", str(tmp_path / "s"), "--profiler", "none",
            "M=64", "K=32", "N=16")
    assert r.returncode == 0, r.stderr
    assert "tuned: schedule " in r.stdout and "(search of " in r.stdout
    doc = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert list(doc["tuning"]) == ["tuned"] and doc["tuning"]["tuned"]["source"] == "search"
    manifest = json.loads((tmp_path / "s" / "tuned" / "manifest.json").read_text())
    assert doc["tuning"]["tuned"]["choice"] == manifest["tuning"]["choice"]
