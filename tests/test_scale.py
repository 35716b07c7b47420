"""Parallel per-rank stage, parse cache, msgspec JSON and the Dask executor give the same figures."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyzers.io import environment, parse_cache, worker_memory
from analyzers.io.load import load_file, load_traces
from analyzers.io.parallel import PER_RANK_KEY
from analyzers.io.plain import to_json, to_plain
from analyzers.overlap.metrics import AnalysisOptions
from analyzers.report import RankStage, analyze, precomputed_results

from .inprocess import cli as cli_here

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
# Two Kineto runs with findings and syncs, and an nsys run (two exports).
SETS = [SAMPLES / "ag-gemm" / "host-sync", SAMPLES / "fsdp" / "zero3", SAMPLES / "ag-gemm-nsys" / "sync-before-loop"]


@pytest.fixture()
def cache_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(parse_cache.ENV_CACHE_DIR, str(folder))
    return folder


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "overlapscope", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


def _tables_equal(a, b) -> None:
    assert (a.rank, a.source, a.fmt, a.world_size, a.rank_source, a.pid) == \
        (b.rank, b.source, b.fmt, b.world_size, b.rank_source, b.pid)
    assert a.names.names == b.names.names and a.devices == b.devices and a.notes == b.notes
    assert a.meta == b.meta
    for name in parse_cache.TABLES:
        x, y = getattr(a, name), getattr(b, name)
        assert list(x.dtypes) == list(y.dtypes), name
        pd.testing.assert_frame_equal(x, y, check_exact=True)


@pytest.mark.parametrize("path", [
    SAMPLES / "fsdp" / "zero3" / "rank1.json.gz",
    SAMPLES / "ag-gemm-nsys" / "sync-before-loop" / "rank0.sqlite",
])
def test_cache_round_trip_is_exact(cache_dir, path):
    fresh = load_file(path)
    assert parse_cache.get(path, None) is None
    assert parse_cache.put(path, None, fresh)
    cached = parse_cache.get(path, None)
    assert cached is not None and len(cached) == len(fresh)
    for a, b in zip(fresh, cached, strict=True):
        _tables_equal(a, b)


def test_stale_and_corrupt_entries_are_rewritten(cache_dir, tmp_path):
    src = tmp_path / "rank0.json.gz"
    shutil.copy(SAMPLES / "ag-gemm" / "baseline" / "rank0.json.gz", src)
    first = load_traces([src], cache=True).ranks[0]
    entry = parse_cache.FileKey.of(src, None).folder()
    assert entry.is_dir()
    # corrupt: a table cut short -> a miss, removed, parsed again and written again
    victim = entry / "0.gpu.parquet"
    victim.write_bytes(victim.read_bytes()[:50])
    assert parse_cache.get(src, None) is None and not entry.exists()
    again = load_traces([src], cache=True).ranks[0]
    _tables_equal(first, again)
    assert parse_cache.get(src, None) is not None
    # a header made for another file state is not trusted
    header = json.loads((entry / parse_cache.HEADER).read_text())
    header["key"]["digest"] = "0" * 64
    (entry / parse_cache.HEADER).write_text(json.dumps(header))
    assert parse_cache.get(src, None) is None
    # stale: the file changes (new mtime, other contents) -> a new key, the new contents are read
    shutil.copy(SAMPLES / "ag-gemm" / "tuned" / "rank0.json.gz", src)
    os.utime(src, ns=(1, 2))
    changed = load_traces([src], cache=True).ranks[0]
    assert len(changed.gpu) != len(first.gpu)
    assert len(changed.gpu) == len(load_file(SAMPLES / "ag-gemm" / "tuned" / "rank0.json.gz")[0].gpu)


def test_cache_commands(cache_dir):
    """In this process (tests/inprocess.py): the cache_dir fixture sets $OVERLAPSCOPE_CACHE_DIR here."""
    assert cli_here("analyze", str(SETS[0]), "-f", "csv").returncode == 0
    info = cli_here("cache", "info")
    assert info.returncode == 0 and "entries: 2" in info.stdout and str(cache_dir) in info.stdout
    cleared = cli_here("cache", "clear")
    assert cleared.returncode == 0 and "removed 2 entries" in cleared.stdout
    assert "entries: 0" in cli_here("cache", "info").stdout
    # --no-cache writes nothing
    assert cli_here("analyze", str(SETS[0]), "-f", "csv", "--no-cache").returncode == 0
    assert "entries: 0" in cli_here("cache", "info").stdout


def _report_json(paths, **load) -> str:
    options = AnalysisOptions()
    traces = load_traces(paths, per_rank=RankStage(options), **load)
    return to_json(analyze(traces, options).to_dict())


@pytest.mark.parametrize("run", SETS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_jobs_cache_and_reference_agree(cache_dir, run):
    reference = to_json(analyze(load_traces([run])).to_dict())  # in-process, no per-rank stage
    assert _report_json([run], jobs=1) == reference
    assert _report_json([run], jobs=2) == reference
    assert _report_json([run], jobs=2, cache=True) == reference  # writes the cache
    options = AnalysisOptions()
    traces = load_traces([run], jobs=2, cache=True, per_rank=RankStage(options))  # reads it
    assert set(traces.meta[PER_RANK_KEY]) == set(traces.ranks)
    assert to_json(analyze(traces, options).to_dict()) == reference
    assert len(list(cache_dir.joinpath("parsed").iterdir())) == len(traces.ranks)


def test_per_rank_results_are_not_reused_for_other_options(cache_dir):
    run = SETS[0]
    traces = load_traces([run], jobs=2, per_rank=RankStage(AnalysisOptions()))
    other = AnalysisOptions(like_hta=True)
    assert to_json(analyze(traces, other).to_dict()) == to_json(analyze(load_traces([run]), other).to_dict())


@pytest.mark.parametrize("change", ["category", "start", "stream", "name", "object category"])
def test_per_rank_results_are_dropped_when_the_tables_change(change):
    """The per-rank stage's results are reused only for the very tables they came from: any change to
    what they depend on (a reclassification, a shifted time, a stream, a name) makes analyze recompute."""
    options = AnalysisOptions()
    traces = load_traces([SETS[0]], per_rank=RankStage(options))
    assert set(precomputed_results(traces, options, True)) == set(traces.ranks)
    trace = traces.ranks[traces.rank_ids()[-1]]
    gpu = trace.gpu
    if change == "category":
        gpu["category"] = pd.Categorical(np.where(gpu["category"] == "comm", "compute", gpu["category"]),
                                         categories=gpu["category"].cat.categories)
    elif change == "start":
        gpu.loc[gpu.index[-1], "start_ns"] -= 1
    elif change == "stream":
        gpu.loc[gpu.index[0], "stream"] += 1
    elif change == "name":
        gpu.loc[gpu.index[0], "name_id"] = (gpu["name_id"].max() + 1) % len(trace.names)
    else:  # a table built by hand, its categories as plain strings
        gpu["category"] = gpu["category"].astype(object)
    assert precomputed_results(traces, options, True) == {}
    fresh = load_traces([SETS[0]])
    fresh.ranks[trace.rank] = trace  # the changed tables, without precomputed results
    assert to_json(analyze(traces, options).to_dict()) == to_json(analyze(fresh, options).to_dict())


def test_cli_json_identical_across_executors(cache_dir, monkeypatch):
    """In this process (tests/inprocess.py); the cache_dir fixture sets $OVERLAPSCOPE_CACHE_DIR here."""
    from distributed import LocalCluster

    run = str(SETS[0])
    outs = {}
    for label, extra in [("jobs1", ["--jobs", "1", "--no-cache"]), ("jobs2", ["--jobs", "2", "--no-cache"]),
                         ("cache-cold", []), ("report-cache-hit", []), ("parse-cache-hit", [])]:
        if label == "parse-cache-hit":  # the report cache emptied: the tables come from the parse cache
            shutil.rmtree(cache_dir / "reports")
        r = cli_here("analyze", run, "-f", "json", *extra)
        assert r.returncode == 0, r.stderr
        outs[label] = r.stdout
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        r = cli_here("analyze", run, "-f", "json", "--no-cache", "--scheduler", cluster.scheduler_address)
        assert r.returncode == 0, r.stderr
        outs["dask"] = r.stdout
        monkeypatch.setenv("OVERLAPSCOPE_SCHEDULER", cluster.scheduler_address)
        r = cli_here("analyze", run, "-f", "json", "--no-cache")
        assert r.returncode == 0, r.stderr
        outs["dask-env"] = r.stdout
    assert len(set(outs.values())) == 1, {k: len(v) for k, v in outs.items()}
    doc = json.loads(outs["jobs1"])
    assert doc["findings"] and doc["cross_rank"]["n_matched"] > 0  # the comparison covers them


def test_unreachable_scheduler_is_one_line_exit_3():
    """Dask retries a refused connection until the connect timeout: 2 s here instead of the default 20."""
    r = cli("analyze", str(SETS[0]), "--scheduler", "tcp://127.0.0.1:9", "--no-cache",
            env={"OVERLAPSCOPE_SCHEDULER_TIMEOUT": "2"})
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert "Dask scheduler" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_bad_scheduler_timeout_is_one_line_exit_3():
    r = cli("analyze", str(SETS[0]), "--scheduler", "tcp://127.0.0.1:9", "--no-cache",
            env={"OVERLAPSCOPE_SCHEDULER_TIMEOUT": "soon"})
    assert r.returncode == 3 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "OVERLAPSCOPE_SCHEDULER_TIMEOUT must be a positive number" in r.stderr and "'soon'" in r.stderr


def test_scheduler_timeout_is_a_positive_number_of_seconds(monkeypatch):
    monkeypatch.delenv(environment.ENV_SCHEDULER_TIMEOUT, raising=False)
    assert environment.scheduler_timeout_s() == 20.0
    monkeypatch.setenv(environment.ENV_SCHEDULER_TIMEOUT, " 2.5 ")
    assert environment.scheduler_timeout_s() == 2.5
    for bad in ("0", "-1", "inf", "nan", "soon"):
        monkeypatch.setenv(environment.ENV_SCHEDULER_TIMEOUT, bad)
        with pytest.raises(ValueError, match="positive number of seconds"):
            environment.scheduler_timeout_s()


def test_plain_json_cleans_in_one_pass():
    obj = {1: np.int64(3), "f": np.float32(0.5), "nan": float("nan"), "inf": np.inf, "t": (1, 2),
           "arr": np.array([1, 2]), "na": pd.NA, "nested": [{"x": np.nan}]}
    assert to_plain(obj) == {"1": 3, "f": 0.5, "nan": None, "inf": None, "t": [1, 2], "arr": [1, 2],
                             "na": None, "nested": [{"x": None}]}
    assert json.loads(to_json({"a": math.nan})) == {"a": None}


def test_report_json_from_its_raw_document_is_the_json_of_its_plain_dict():
    """The CLI encodes report.document() straight (no clean pass): the bytes must be those of to_dict(),
    on a set with cross-rank tables (NaN where a rank is not in a collective) and blocking syncs."""
    run = Path(__file__).resolve().parents[1] / "sample_traces" / "ag-gemm" / "host-sync"
    report = analyze(load_traces([run]))
    assert report.syncs and any(len(df) for df in report.syncs.values()) and report.cross_rank is not None
    assert to_json(report.document()) == to_json(report.to_dict())
    assert json.loads(to_json(report.document())) == report.to_dict()
    assert to_plain(report.cross_rank.document()) == report.cross_rank.to_dict()


def test_hold_arenas_keeps_a_sample_only_in_processes_that_asked(monkeypatch):
    monkeypatch.setattr(worker_memory, "_holding", False)
    monkeypatch.setattr(worker_memory, "_held", [])
    worker_memory.hold_arenas(list(range(1000)))
    assert worker_memory._held == []  # the app, a --jobs 1 run: nothing kept
    monkeypatch.setattr(worker_memory, "_holding", True)
    worker_memory.hold_arenas(list(range(1000)))
    assert worker_memory._held == [0, 256, 512, 768]
    worker_memory.hold_arenas(["next file"])  # the next file's sample replaces the last one's
    assert worker_memory._held == ["next file"]
    monkeypatch.setattr(worker_memory, "_hold_everything", False)
    worker_memory.last_file_follows()  # a worker's last file: all of it is left for the exit
    worker_memory.hold_arenas(list(range(1000)))
    assert worker_memory._held == list(range(1000))
    worker_memory.hold_arenas(["one more file after all"])  # still one file's objects at most
    assert worker_memory._held == ["one more file after all"]
    monkeypatch.setattr(worker_memory, "_holding", False)
    monkeypatch.setattr(worker_memory, "_hold_everything", False)
    worker_memory.last_file_follows()
    assert worker_memory._hold_everything is False  # not in a pool worker: nothing is held, ever
    code = "from analyzers.io import worker_memory as w; w.keep_freed_memory(); print(w._holding)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "True"


def test_bad_file_in_a_worker_is_one_line_exit_3(tmp_path, cache_dir):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(SAMPLES / "ag-gemm" / "baseline" / "rank0.json.gz", run / "rank0.json.gz")
    (run / "rank1.json.gz").write_bytes((SAMPLES / "ag-gemm" / "baseline" / "rank1.json.gz").read_bytes()[:1000])
    before = (run / "rank1.json.gz").read_bytes()
    r = cli("analyze", str(run), "--jobs", "2", env={parse_cache.ENV_CACHE_DIR: str(cache_dir)})
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert r.stderr.strip() == f"overlapscope: error: {run / 'rank1.json.gz'}: truncated or corrupt gzip data " \
                               "(Compressed file ended before the end-of-stream marker was reached)"
    assert (run / "rank1.json.gz").read_bytes() == before


def test_workers_keep_the_host_tables_when_the_caller_only_analyzes(cache_dir):
    """`overlapscope analyze` loads with RankStage(send_host_tables=False): the workers send back the GPU
    and sync tables and the per-rank results only, and the report is the same as from the full tables."""
    from analyzers.timeline.iterations import StepSelection
    from analyzers.timeline.model import HostTablesLeftInWorker, require_host_tables

    run, options = SETS[0], AnalysisOptions()  # ag-gemm host-sync: collectives match, syncs, findings
    reference = to_json(analyze(load_traces([run]), options).to_dict())
    full = load_traces([run], jobs=2, per_rank=RankStage(options))
    kept = load_traces([run], jobs=2, cache=True, per_rank=RankStage(options, send_host_tables=False))
    for r, t in kept.ranks.items():
        assert t.runtime.empty and t.host_ops.empty and list(t.runtime.columns) == list(full.ranks[r].runtime.columns)
        assert t.host_rows_kept_in_worker == full.ranks[r].host_row_counts() != (0, 0, 0)
        assert t.sync_events.empty and list(t.sync_events.columns) == list(full.ranks[r].sync_events.columns)
        with pytest.raises(HostTablesLeftInWorker, match=f"rank {r} .*stayed in the per-rank worker"):
            require_host_tables(t)
    assert set(precomputed_results(kept, options, True)) == set(kept.ranks)
    assert to_json(analyze(kept, options).to_dict()) == reference
    # the parse cache got the whole tables (written in the worker before they were dropped)
    cached = load_traces([run], cache=True)
    for r, t in cached.ranks.items():
        _tables_equal(t, full.ranks[r])
    # analyzed otherwise, the missing tables are an error, not an empty host timeline
    with pytest.raises(HostTablesLeftInWorker):
        analyze(kept, AnalysisOptions(like_hta=True))
    with pytest.raises(HostTablesLeftInWorker):
        parse_cache.put(Path(kept.ranks[0].source), None, [kept.ranks[0]])
    # a step selection is cut in the caller, from the host tables: they are sent then
    steps = AnalysisOptions(steps=StepSelection.parse("2"))
    selected = load_traces([run], jobs=2, per_rank=RankStage(steps, send_host_tables=False))
    assert all(t.host_rows_kept_in_worker is None and not t.host_ops.empty for t in selected)
