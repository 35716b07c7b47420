"""Round three of hostile input, the data half: no sentinel inside a valid range (a set moved to
negative time gives the same answer), extreme what-if parameters refused, not wrapped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from analyzers.errors import OptionValueError
from analyzers.graph.fixes import MAX_FACTOR, MIN_FACTOR, parse_fix
from analyzers.io.load import load_file
from analyzers.timeline.constants import NO_TIME
from analyzers.timeline.iterations import launch_times
from tests.hostile_corpus import SAMPLES, SHIFT_NS, shifted_set, time_diffs

ROOT = Path(__file__).resolve().parents[1]
HOST_SYNC = SAMPLES / "ag-gemm" / "host-sync"
NSYS_SYNC = SAMPLES / "ag-gemm-nsys" / "sync-in-loop"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "overlapscope", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def _json(*args: str) -> dict:
    r = cli(*args, "-f", "json", "--no-cache")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("sample", [HOST_SYNC, NSYS_SYNC, SAMPLES / "fsdp" / "zero3",
                                    SAMPLES / "symm-mem" / "two-stream"], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_set_moved_to_negative_time_gives_the_same_analysis(sample: Path, tmp_path: Path):
    moved = shifted_set(sample, tmp_path / "moved")
    a, b = _json("analyze", sample), _json("analyze", moved)
    assert b["ranks"][0]["window_start_ns"] < 0  # the move took every time below zero
    assert time_diffs(a, b) == []


def test_negative_time_keeps_steps_syncs_and_the_host_sync_saving(tmp_path: Path):
    moved = shifted_set(HOST_SYNC, tmp_path / "moved")
    a, b = _json("analyze", HOST_SYNC), _json("analyze", moved)
    ids = sorted(f["id"] for f in b["findings"])
    assert ids == sorted(f["id"] for f in a["findings"]) and "host-blocking-sync" in ids
    assert "serialized-streams" not in ids
    assert len(b["critical_path"]["steps"]) == len(a["critical_path"]["steps"]) == 3
    assert b["syncs"]["n"] == a["syncs"]["n"] > 0
    wa, wb = _json("whatif", HOST_SYNC, "--fix", "host-syncs"), _json("whatif", moved, "--fix", "host-syncs")
    assert wb["saving_ns"] == wa["saving_ns"] > 0


def test_negative_time_through_nsys_keeps_launches_and_steps(tmp_path: Path):
    moved = shifted_set(NSYS_SYNC, tmp_path / "moved")
    for path in (NSYS_SYNC / "rank0.sqlite", moved / "rank0.sqlite"):
        (t,) = load_file(path)
        launch = launch_times(t)
        assert len(launch) and (launch != NO_TIME).all()  # every kernel's launch found, whatever the clock's sign
    wa, wb = _json("whatif", NSYS_SYNC, "--fix", "host-syncs"), _json("whatif", moved, "--fix", "host-syncs")
    assert abs(wb["saving_ns"] - wa["saving_ns"]) <= 2 and len(wb["per_step"]) == len(wa["per_step"]) > 0
    assert wb["measured_step_ns"] == wa["measured_step_ns"]


def test_no_time_sentinel_never_reaches_a_document(tmp_path: Path):
    doc = _json("analyze", shifted_set(HOST_SYNC, tmp_path / "moved"))
    text = json.dumps(doc)
    assert str(NO_TIME) not in text
    # a sync after which nothing was launched has no next start: null, not a number
    rows = [r for rows in doc["syncs"]["per_rank"].values() for r in rows]
    assert all(r["next_gpu_start_ns"] is None or r["next_gpu_start_ns"] < 0 for r in rows)
    assert abs(SHIFT_NS) > 0


@pytest.mark.parametrize("fix", ["compute-speed=1e-14", "comm-speed=1e-300", "compute-speed=1e-4",
                                 "comm-speed=1e7", "compute-speed=1e308"])
def test_extreme_speed_factors_are_a_usage_error(fix: str):
    with pytest.raises(OptionValueError):
        parse_fix(fix)
    r = cli("whatif", HOST_SYNC, "--fix", fix, "--no-cache")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "between" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("factor", [MIN_FACTOR, MAX_FACTOR])
def test_speed_factors_at_the_bounds_predict_without_wrapping(factor: float):
    doc = _json("whatif", HOST_SYNC, "--fix", f"compute-speed={factor:g}")
    measured, predicted = doc["measured_step_ns"], doc["predicted_step_ns"]
    assert predicted > 0
    if factor < 1:  # compute a thousand times slower: the step grows, far past what was measured
        assert predicted > 10 * measured
    else:  # compute free: the step shrinks
        assert predicted < measured
    assert np.iinfo(np.int64).min < predicted < np.iinfo(np.int64).max
