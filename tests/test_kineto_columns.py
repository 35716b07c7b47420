"""How the Kineto loader turns decoded events into tables: row order, name ids, fallbacks, GC state.

The loader reads each table's events once into columns and sorts the rows before the table is
built; these pin down what that must keep from the earlier table-then-sort construction.
"""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from analyzers.errors import BadInputError
from analyzers.io import parse_cache
from analyzers.io.kineto import load_kineto
from analyzers.io.kineto_schema import ARG_FIELDS, Args, factorize, gc_paused, str_codes, transpose


def _event(cat: str, name: str, ts: float, dur: float = 10, ph: str = "X", **args: Any) -> dict[str, Any]:
    return {"ph": ph, "cat": cat, "name": name, "pid": 7, "tid": 3, "ts": ts, "dur": dur, "args": args}


def _write(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": 0, "world_size": 1}}))
    return path


def test_name_ids_follow_table_order_not_start_order(tmp_path):
    # file order B-kernel (late), A-kernel (early): ids are given in table order, rows sorted by start
    path = _write(tmp_path / "rank0.json", [
        _event("kernel", "late", 300, device=0, stream=7),
        _event("kernel", "early", 100, device=0, stream=7),
        _event("cuda_runtime", "cudaLaunchKernel", 50),
        _event("cpu_op", "aten::mm", 40),
    ])
    t = load_kineto(path)
    assert t.names.names == ["late", "early", "cudaLaunchKernel", "aten::mm"]
    assert t.gpu["start_ns"].tolist() == [100_000, 300_000]
    assert t.names_of(t.gpu["name_id"].to_numpy()).tolist() == ["early", "late"]
    assert t.gpu.index.equals(pd.RangeIndex(2))


def test_ties_keep_category_order_then_file_order(tmp_path):
    path = _write(tmp_path / "rank0.json", [
        _event("gpu_memset", "set", 100, device=0, stream=7),
        _event("kernel", "k2", 100, device=0, stream=7),
        _event("gpu_memcpy", "copy", 100, device=0, stream=7),
        _event("Kernel", "k1-old-name", 100, device=0, stream=7),  # PyTorch <= 1.8 name, same table
        _event("kernel", "k3", 100, device=0, stream=7),
    ])
    t = load_kineto(path)
    # category order (kernel, Kernel via its lower-case name, memcpy, memset), file order within
    assert t.names_of(t.gpu["name_id"].to_numpy()).tolist() == ["k2", "k1-old-name", "k3", "copy", "set"]
    assert t.gpu["kind"].tolist() == ["kernel", "kernel", "kernel", "memcpy", "memset"]


def test_only_complete_events_and_host_kinds(tmp_path):
    path = _write(tmp_path / "rank0.json", [
        _event("cpu_op", "op", 10, **{"External id": 5}),
        _event("cpu_instant_event", "tick", 11, ph="i"),
        _event("user_annotation", "step", 9),
        _event("kernel", "k", 20, ph="B", device=0, stream=7),  # not complete: left out
        _event("kernel", "k", 30, device=0, stream=7),
    ])
    t = load_kineto(path)
    assert t.host_ops["kind"].tolist() == ["user_annotation", "cpu_op"]
    assert t.host_ops["correlation"].tolist() == [-1, 5]
    assert len(t.gpu) == 1
    fresh = pd.DataFrame({"kind": np.array(["cpu_op"], dtype=object)})["kind"].dtype
    assert t.host_ops["kind"].dtype == fresh


def test_missing_device_and_stream_fall_back_to_pid_and_tid_row_by_row(tmp_path):
    path = _write(tmp_path / "rank0.json", [
        _event("kernel", "with", 10, device=1, stream=9),
        _event("kernel", "without", 20),
        {**_event("kernel", "string pid", 30, stream=-5), "pid": "Spans", "tid": 12},
    ])
    t = load_kineto(path)
    assert t.gpu["device"].tolist() == [1, 7, 0]
    assert t.gpu["stream"].tolist() == [9, 3, 12]


def test_empty_tables_keep_their_dtypes_through_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(parse_cache.ENV_CACHE_DIR, str(tmp_path / "cache"))
    path = _write(tmp_path / "rank0.json", [_event("kernel", "k", 10, device=0, stream=7)])
    fresh = load_kineto(path)
    assert fresh.host_ops.empty and fresh.sync_events.empty and fresh.runtime.empty
    assert parse_cache.put(path, None, [fresh])
    (cached,) = parse_cache.get(path, None)
    for name in parse_cache.TABLES:
        a, b = getattr(fresh, name), getattr(cached, name)
        assert list(a.dtypes) == list(b.dtypes), name
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert list(cached.gpu["kind"].cat.categories) == ["kernel", "memcpy", "memset"]
    assert cached.names.names == fresh.names.names


@pytest.mark.parametrize("enabled", [True, False])
def test_gc_state_is_restored_after_a_load_and_after_a_failure(tmp_path, enabled):
    good = _write(tmp_path / "rank0.json", [_event("kernel", "k", 10, device=0, stream=7)])
    bad = tmp_path / "rank1.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "ts": "soon"}]}')
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        load_kineto(good)
        assert gc.isenabled() is enabled
        with pytest.raises(BadInputError):
            load_kineto(bad)
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


def test_column_helpers():
    with gc_paused():
        assert not gc.isenabled()
    cols = transpose([], ARG_FIELDS)
    assert set(cols) == set(ARG_FIELDS) and all(v == () for v in cols.values())
    cols = transpose([Args(device=1), Args(stream="x")], ARG_FIELDS)
    assert cols["device"] == (1, -1) and cols["stream"] == (-1, "x")

    class Named:
        def __init__(self, name: str) -> None:
            self.name = name

    rows = [Named(n) for n in ["b", "a", "b", "c", "a"]]
    codes, uniques = str_codes(rows, lambda r: r.name)
    assert uniques == ["b", "a", "c"] and codes.tolist() == [0, 1, 0, 2, 1]
    assert str_codes([], lambda r: r.name)[1] == []
    codes, uniques = factorize(["x", 1, "x", None])
    assert uniques == ["x", 1, None] and codes.tolist() == [0, 1, 0, 2]


def test_arrow_strings_take_64_bit_offsets_past_2_gb(monkeypatch):
    import pyarrow as pa

    from analyzers.io import kineto_schema

    assert kineto_schema.arrow_strings(["a", None]).type == pa.string()
    real = pa.array

    def overflowing(values, type=None):  # what pa.array does past 2 GB of text in 32-bit offsets
        if type == pa.string():
            return pa.chunked_array([real(values[:1], type=type), real(values[1:], type=type)])
        return real(values, type=type)

    monkeypatch.setattr(kineto_schema.pa, "array", overflowing)
    wide = kineto_schema.arrow_strings(["a", "b", "a"])
    assert isinstance(wide, pa.Array) and wide.type == pa.large_string() and wide.to_pylist() == ["a", "b", "a"]
