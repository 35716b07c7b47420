"""Round three of hostile input, the data half: no sentinel inside a valid range (a set moved to
negative time gives the same answer), extreme what-if parameters refused, not wrapped."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from analyzers.errors import OptionValueError
from analyzers.graph.fixes import MAX_FACTOR, MIN_FACTOR, parse_fix
from analyzers.io.load import load_file
from analyzers.timeline.constants import NO_TIME
from analyzers.timeline.iterations import launch_times
from tests.hostile_corpus import SAMPLES, SHIFT_NS, shifted_set, time_diffs

from .inprocess import cli

ROOT = Path(__file__).resolve().parents[1]
HOST_SYNC = SAMPLES / "ag-gemm" / "host-sync"
NSYS_SYNC = SAMPLES / "ag-gemm-nsys" / "sync-in-loop"


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
    rows = doc["syncs"]["rows"]  # the syncs with the most GPU idle (every sync: analyze --tables)
    assert all(r["next_gpu_start_ns"] is None or r["next_gpu_start_ns"] < 0 for r in rows)
    assert abs(SHIFT_NS) > 0


@pytest.mark.parametrize("fix", ["compute-speed=1e-14", "comm-speed=1e-300", "compute-speed=1e-4",
                                 "comm-speed=1e7", "compute-speed=1e308", "compute-speed=1e-400",
                                 "comm-speed=0", "compute-speed=-1", "comm-speed=inf", "compute-speed=nan"])
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


# --------------------------------------------------------------------------- nsys rows counted or refused
US = 1000


def _overlapping_pair(**comm: object) -> list[dict]:
    """A GEMM [0, 100) µs and an NCCL kernel [50, 150) µs on another stream (overlap 50 of 100)."""
    return [{"start": 10_000 * US, "end": 10_100 * US, "name_id": 1},
            {"start": 10_050 * US, "end": 10_150 * US, "name_id": 2, "stream": 8, **comm}]


def _rank0(doc: dict) -> dict:
    return doc["ranks"][0]


def test_kernels_with_a_null_globalpid_are_given_to_their_process_with_a_note(tmp_path: Path):
    from tests.hostile_corpus import GEMM, NCCL, write_nsys

    rows = [{**k, "pid": None} for k in _overlapping_pair()]
    path = write_nsys(tmp_path / "rank0.sqlite", rows, {1: GEMM, 2: NCCL})
    doc = _json("analyze", path)
    assert _rank0(doc)["compute_ns"] == 100 * US and _rank0(doc)["comm_ns"] == 100 * US
    notes = " ".join(doc["notes"] + _rank0(doc)["notes"])
    assert "2 GPU activities have no process id (globalPid NULL): given to process 200" in notes


def test_null_globalpid_rows_no_process_can_own_are_counted_not_silently_dropped(tmp_path: Path):
    from tests.hostile_corpus import GEMM, NCCL, write_nsys

    rows = [*_overlapping_pair(), {"start": 20_000 * US, "end": 28_300 * US, "name_id": 1, "pid": None,
                                   "launched_by": None}]
    path = write_nsys(tmp_path / "run.sqlite", [*rows, {**rows[0], "pid": 300}], {1: GEMM, 2: NCCL}, pids=(200, 300))
    r = cli("analyze", path, "-f", "json", "--no-cache")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    notes = " ".join(doc["notes"] + [n for rk in doc["ranks"] for n in rk["notes"]])
    assert "1 GPU activities have no process id (globalPid NULL): left out" in notes


@pytest.mark.parametrize("start,end", [(2**63 - 1, -5), (2**63 - 1, 2**63 - 1), (-(2**63), 100), (0, 2**63 - 1)])
def test_a_kernel_at_the_edge_of_int64_is_refused_not_wrapped(tmp_path: Path, start: int, end: int):
    from tests.hostile_corpus import GEMM, NCCL, write_nsys

    path = write_nsys(tmp_path / "rank0.sqlite", [*_overlapping_pair(), {"start": start, "end": end, "name_id": 1}],
                      {1: GEMM, 2: NCCL})
    r = cli("analyze", path, "--no-cache")
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stderr.strip().count("\n") == 0 and str(path) in r.stderr and "Traceback" not in r.stderr


def test_rows_without_a_start_or_end_are_counted(tmp_path: Path):
    from tests.hostile_corpus import GEMM, NCCL, write_nsys

    path = write_nsys(tmp_path / "rank0.sqlite", [*_overlapping_pair(), {"start": None, "end": 5, "name_id": 1},
                                                  {"start": 7, "end": None, "name_id": 2}], {1: GEMM, 2: NCCL})
    doc = _json("analyze", path)
    assert "2 rows of CUPTI_ACTIVITY_KIND_KERNEL have no start or no end time" in " ".join(_rank0(doc)["notes"])
    assert _rank0(doc)["compute_ns"] == 100 * US


def test_kernels_whose_names_are_missing_from_stringids_are_noted_and_not_compute(tmp_path: Path):
    from tests.hostile_corpus import GEMM, write_nsys

    # the NCCL kernel's name id (2) is not in StringIds: it is not compute, and a note says so
    path = write_nsys(tmp_path / "rank0.sqlite", _overlapping_pair(), {1: GEMM})
    doc = _json("analyze", path)
    rank = _rank0(doc)
    assert rank["compute_ns"] == 100 * US and rank["compute_compute_overlap_ns"] == 0
    assert any("1 kernels have a name id the export's StringIds table does not hold" in n for n in rank["notes"])
