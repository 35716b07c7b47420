"""Property-based fuzzing (hypothesis) of both loaders and of the interval algebra and metrics.

Loaders: bytes and fields of real small traces (the bundled ag-gemm baseline rank 0, Kineto; the
public nvfuser Nsight Systems export) are mutated; whatever comes out, the only error that may
escape is BadInputError, with one line naming the file. A trace that loads has int64 tables whose
rows end no earlier than they start, and metrics that obey the invariants below.

Metrics: on random kernels, 0 <= ratio <= 1, overlap <= min(comm, compute), exposed = comm -
overlap, busy/idle/span consistent, and per-iteration figures over windows that partition the
span add up to the whole.

Example counts: FUZZ_EXAMPLES (default 300) per loader test, two tests per loader: 600 per loader
(and half of FUZZ_EXAMPLES for the metrics). Examples are derandomized: CI runs the same ones each
time, at a known cost (an Nsight Systems load is ~0.12 s, so 300 keeps the module near a minute on the
2-core machine); FUZZ_EXAMPLES=20000 explores further.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzers.errors import BadInputError
from analyzers.io.load import load_traces
from analyzers.overlap.metrics import OverlapMetrics, iteration_metrics, rank_metrics, window_metrics
from analyzers.timeline.iterations import gpu_step_windows

from .conftest import NSYS_TRACES, ROOT
from .synth import COMM, GEMM, rank_trace

KINETO_BASE = gzip.decompress((ROOT / "sample_traces" / "ag-gemm" / "baseline" / "rank0.json.gz").read_bytes())
NSYS_BASE = NSYS_TRACES / "nvfuser_report1.sqlite"
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module", autouse=True)
def private_cache(workdir: Path):
    old = os.environ.get("OVERLAPSCOPE_CACHE_DIR")
    os.environ["OVERLAPSCOPE_CACHE_DIR"] = str(workdir / "cache")
    yield
    if old is None:
        os.environ.pop("OVERLAPSCOPE_CACHE_DIR", None)
    else:
        os.environ["OVERLAPSCOPE_CACHE_DIR"] = old


# --------------------------------------------------------------------------- invariants


def check_window(m: OverlapMetrics) -> None:
    assert 0 <= m.overlap_ns <= min(m.comm_ns, m.compute_ns)
    assert m.exposed_comm_ns == m.comm_ns - m.overlap_ns
    if m.comm_ns == 0:
        assert m.overlap_ratio is None
    else:
        assert 0.0 <= m.overlap_ratio <= 1.0 and m.overlap_ratio == m.overlap_ns / m.comm_ns
    if m.hidden_fraction_of_min is not None:
        assert 0.0 <= m.hidden_fraction_of_min <= 1.0
    assert max(m.comm_ns, m.compute_ns) <= m.comm_ns + m.compute_ns - m.overlap_ns <= m.busy_ns
    assert 0 <= m.busy_ns <= m.span_ns or m.n_gpu == 0
    assert m.idle_ns == m.span_ns - m.busy_ns >= 0
    assert m.compute_compute_overlap_ns <= m.compute_ns


def row_metrics(row: dict[str, Any]) -> OverlapMetrics:
    """An iterations-table row back as OverlapMetrics (the table holds undefined ratios as NaN)."""
    return OverlapMetrics(**{k: (None if isinstance(row[k], float) and np.isnan(row[k]) else row[k])
                             for k in OverlapMetrics.__dataclass_fields__})


def check_loaded(path: Path) -> None:
    """Load through the public entry; a BadInputError must be one line naming the file.

    No warning may be printed either: it would break the one-line promise on stderr (and a numpy
    cast warning means a value wrapped around).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            ts = load_traces([path])
        except BadInputError as exc:
            text = str(exc)
            assert "\n" not in text and text.startswith(str(path)), text
            ts = None
    assert not caught, [str(w.message) for w in caught]
    if ts is None:
        return
    for t in ts:
        for table in (t.gpu, t.runtime, t.host_ops, t.sync_events):
            assert str(table["start_ns"].dtype) == "int64" and str(table["end_ns"].dtype) == "int64"
            assert (table["end_ns"] >= table["start_ns"]).all()
        rm = rank_metrics(t)
        check_window(rm.whole)
        for row in rm.iterations.to_dict("records") if not rm.iterations.empty else []:
            check_window(row_metrics(row))
        its = rm.iterations
        if not its.empty:
            lo, hi = its["window_start_ns"].to_numpy(), its["window_end_ns"].to_numpy()
            if (lo[1:] >= hi[:-1]).all():  # disjoint iterations cannot hold more than the whole
                for col in ("comm_ns", "compute_ns", "overlap_ns", "busy_ns"):
                    assert its[col].sum() <= getattr(rm.whole, col)


# --------------------------------------------------------------------------- Kineto loader


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(KINETO_BASE) - 1), st.sampled_from(["flip", "drop", "insert", "cut"]),
                          st.binary(min_size=1, max_size=4)), min_size=1, max_size=4))
def test_kineto_loader_on_mutated_bytes(workdir: Path, edits: list[tuple[int, str, bytes]]) -> None:
    data = bytearray(KINETO_BASE)
    for pos, how, blob in edits:
        if not data:
            break
        pos %= len(data)
        if how == "flip":
            data[pos] ^= blob[0] or 1
        elif how == "drop":
            del data[pos:pos + len(blob)]
        elif how == "insert":
            data[pos:pos] = blob
        else:
            del data[pos:]
    path = workdir / "mutated rank0.json"
    path.write_bytes(bytes(data))
    check_loaded(path)


BASE_DOC = json.loads(KINETO_BASE)
X_EVENTS = [i for i, e in enumerate(BASE_DOC["traceEvents"]) if e.get("ph") == "X"]
FIELDS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"]
ARGS = ["device", "stream", "correlation", "External id", "Collective name", "Process Group Name", "Seq",
        "In msg nelems", "Out msg nelems", "Group size", "dtype", "src device", "dst device"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12) | st.sampled_from(["kernel", "cuda_runtime", "cpu_op", "X", "ProfilerStep#1", ""]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6)
top_keys = st.sampled_from(["distributedInfo", "deviceProperties", "baseTimeNanoseconds", "traceEvents",
                            "schemaVersion"])


@FUZZ
@given(st.lists(st.one_of(
    st.tuples(st.just("event"), st.sampled_from(X_EVENTS), st.sampled_from(FIELDS), json_values),
    st.tuples(st.just("arg"), st.sampled_from(X_EVENTS), st.sampled_from(ARGS), json_values),
    st.tuples(st.just("top"), st.just(0), top_keys, json_values),
    st.tuples(st.just("delete"), st.sampled_from(X_EVENTS), st.sampled_from(FIELDS), st.none()),
), min_size=1, max_size=5))
def test_kineto_loader_on_mutated_fields(workdir: Path, edits: list[tuple[str, int, str, Any]]) -> None:
    doc = json.loads(KINETO_BASE)
    for how, i, key, value in edits:
        if how == "top":
            doc[key] = value
            continue
        events = doc.get("traceEvents")
        if not isinstance(events, list) or i >= len(events) or not isinstance(events[i], dict):
            continue
        if how == "event":
            events[i][key] = value
        elif how == "delete":
            events[i].pop(key, None)
        elif isinstance(events[i].get("args"), dict):
            events[i]["args"][key] = value
    path = workdir / "rank0 fields ✓.json"
    path.write_text(json.dumps(doc))
    check_loaded(path)


# --------------------------------------------------------------------------- Nsight Systems loader


def _columns() -> dict[str, list[str]]:
    conn = sqlite3.connect(f"{NSYS_BASE.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        wanted = [t for t in tables if t.startswith(("CUPTI_ACTIVITY_KIND_", "NVTX_EVENTS", "StringIds",
                                                     "TARGET_INFO_", "META_DATA_", "ENUM_CUDA_MEM"))]
        return {t: [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')] for t in wanted}
    finally:
        conn.close()


NSYS_COLUMNS = _columns()
NSYS_BYTES = NSYS_BASE.read_bytes()
sql_values = (st.none() | st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, -1, 1, 2**31, 2**62])
              | st.floats(allow_nan=False) | st.text(max_size=10) | st.binary(max_size=6))


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(NSYS_BYTES) - 1), st.binary(min_size=1, max_size=8)),
                min_size=1, max_size=6), st.booleans())
def test_nsys_loader_on_mutated_bytes(workdir: Path, edits: list[tuple[int, bytes]], cut: bool) -> None:
    data = bytearray(NSYS_BYTES)
    for pos, blob in edits:
        data[pos:pos + len(blob)] = blob
    if cut:
        del data[edits[0][0]:]
    path = workdir / "mutated report.sqlite"
    path.write_bytes(bytes(data))
    check_loaded(path)
    assert not list(workdir.glob("*-wal")) and not list(workdir.glob("*-shm"))


@FUZZ
@given(st.lists(st.one_of(
    st.tuples(st.just("set"), st.sampled_from(sorted(NSYS_COLUMNS)), st.integers(0, 2000), st.integers(0, 50),
              sql_values),
    st.tuples(st.just("drop"), st.sampled_from(sorted(NSYS_COLUMNS)), st.just(0), st.just(0), st.none()),
    st.tuples(st.just("empty"), st.sampled_from(sorted(NSYS_COLUMNS)), st.just(0), st.just(0), st.none()),
), min_size=1, max_size=4))
def test_nsys_loader_on_mutated_fields(workdir: Path, edits: list[tuple[str, str, int, int, Any]]) -> None:
    path = workdir / "fields report.sqlite"
    shutil.copyfile(NSYS_BASE, path)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA synchronous = OFF")  # a scratch copy: no fsync per example
    conn.execute("PRAGMA journal_mode = MEMORY")
    try:
        for how, table, row, col, value in edits:
            if how == "drop":
                conn.execute(f'DROP TABLE IF EXISTS "{table}"')
            elif how == "empty":
                conn.execute(f'DELETE FROM "{table}"') if _exists(conn, table) else None
            elif _exists(conn, table):
                column = NSYS_COLUMNS[table][col % len(NSYS_COLUMNS[table])]
                try:
                    conn.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE rowid IN '
                                 f'(SELECT rowid FROM "{table}" LIMIT 1 OFFSET ?)', (value, row))
                except sqlite3.IntegrityError:
                    pass  # the schema's own constraints (NOT NULL, UNIQUE) refuse this edit: nsys could not write it
        conn.commit()
    finally:
        conn.close()
    check_loaded(path)


def _exists(conn: sqlite3.Connection, table: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone() is not None


# --------------------------------------------------------------------------- interval algebra and metrics


kernel = st.tuples(st.integers(0, 400), st.integers(0, 120), st.integers(0, 3),
                   st.sampled_from([COMM, GEMM, "Memcpy DtoD (Device -> Device)"]))


@settings(max_examples=max(EXAMPLES // 2, 1), deadline=None, derandomize=True, database=None)
@given(st.lists(kernel, max_size=25), st.lists(st.integers(1, 519), max_size=6, unique=True))
def test_metrics_invariants_and_iterations_add_up(kernels: list[tuple[int, int, int, str]], cuts: list[int]) -> None:
    t = rank_trace([(s, s + d, stream, name) for s, d, stream, name in kernels])
    whole = window_metrics(t.gpu, 0, 520)
    check_window(whole)
    check_window(window_metrics(t.gpu))
    # brute force on a unit timeline
    line = {c: np.zeros(520, dtype=bool) for c in ("comm", "compute")}
    for s, e, c in zip(t.gpu["start_ns"], t.gpu["end_ns"], t.gpu["category"], strict=True):
        if c in line:
            line[c][s:e] = True
    assert whole.comm_ns == line["comm"].sum() and whole.compute_ns == line["compute"].sum()
    assert whole.overlap_ns == (line["comm"] & line["compute"]).sum()
    # iterations that partition [0, 520) add up to the whole, figure by figure
    edges = [0, *sorted(cuts), 520]
    windows = pd.DataFrame({"step": range(len(edges) - 1), "name": [f"ProfilerStep#{i}" for i in range(len(edges) - 1)],
                            "gpu_start_ns": edges[:-1], "gpu_end_ns": edges[1:]})
    its = iteration_metrics(t.gpu, windows)
    for row in its.to_dict("records"):
        check_window(row_metrics(row))
    for col in ("comm_ns", "compute_ns", "overlap_ns", "exposed_comm_ns", "busy_ns"):
        assert its[col].sum() == getattr(whole, col), col


def test_real_iterations_never_exceed_the_whole(hta_dir: Path) -> None:
    """The same consistency on a real trace's own ProfilerStep windows (disjoint on the GPU)."""
    (t,) = load_traces([hta_dir / "nccl_data.json.gz"])
    windows = gpu_step_windows(t)
    assert len(windows) >= 2
    rm = rank_metrics(t)
    for col in ("comm_ns", "compute_ns", "overlap_ns"):
        assert 0 < rm.iterations[col].sum() <= getattr(rm.whole, col)


def test_out_of_range_numbers_in_args_do_not_wrap_around(workdir: Path) -> None:
    """Found by the field fuzz: an arg like "device": 1e300 was cast to int64 with a numpy warning on
    stderr and a wrapped-around value; now it counts as missing, silently and exactly."""
    doc = json.loads(KINETO_BASE)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    kernels[0]["args"].update({"device": 1e300, "stream": "inf", "correlation": -1e30})
    path = workdir / "huge args.json"
    path.write_text(json.dumps(doc))
    check_loaded(path)
    (t,) = load_traces([path])
    first = t.gpu[t.gpu["start_ns"] == t.gpu["start_ns"].min()].iloc[0]
    assert first["correlation"] == -1 and 0 <= first["device"] < 16 and first["stream"] >= 0
