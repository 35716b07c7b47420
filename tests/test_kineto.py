"""Kineto loader on the real HTA test traces, and on bad input."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

import pytest

from analyzers.errors import BadInputError, MixedRunsError
from analyzers.io.kineto import load_kineto
from analyzers.io.load import load_traces
from analyzers.overlap.metrics import AnalysisOptions, rank_metrics

# (file, rank, world, whole-trace overlap %, HTA 0.5.0 overlap %) from tests/data/public/README.md
REFERENCE = [
    ("trace_filter_sampled_rank-0.json.gz", 0, 128, 14.95, 11.81),
    ("trace_filter_sampled_rank-1.json.gz", 1, 128, 19.93, 20.05),
    ("nccl_data.json.gz", 0, 2, 15.61, 14.31),
    ("df_index_resolver.json.gz", 1, 2, 0.0, 0.0),
    ("negative_queue_rank0.json.gz", 0, 16, 1.36, 1.37),
    ("trace_diff_control.json.gz", 3, 8, 46.24, 47.03),
    ("trace_diff_test.json.gz", 1, 2, 70.84, 68.80),
]


@pytest.mark.parametrize("name,rank,world,whole,hta", REFERENCE)
def test_overlap_matches_reference_figures(hta_dir, name, rank, world, whole, hta):
    (t,) = load_traces([hta_dir / name])
    assert (t.rank, t.world_size, t.rank_source) == (rank, world, "distributedInfo")
    got = rank_metrics(t).overlap_ratio
    got_hta = rank_metrics(t, AnalysisOptions(like_hta=True)).overlap_ratio
    assert abs(100 * got - whole) <= 0.1
    assert abs(100 * got_hta - hta) <= 0.2


def test_tables_are_columnar_int64_ns(hta_dir):
    t = load_kineto(hta_dir / "nccl_data.json.gz")
    for tab in (t.gpu, t.runtime, t.host_ops):
        assert str(tab["start_ns"].dtype) == "int64" and str(tab["end_ns"].dtype) == "int64"
        assert (tab["end_ns"] >= tab["start_ns"]).all()
    assert (t.gpu["kind"] == "kernel").sum() == 2700 and (t.gpu["kind"] == "memcpy").sum() == 960
    assert (t.gpu["kind"] == "memset").sum() == 114
    nccl = t.gpu[t.gpu["coll_name"] != ""]
    # kernel args carry the collective metadata in this trace
    assert set(nccl["coll_name"]) == {"AllReduce", "Broadcast"} and set(nccl["pg"]) == {"0"}
    steps = t.host_ops[t.names_of(t.host_ops["name_id"].to_numpy()) == "ProfilerStep#4"]
    assert len(steps) == 1
    # float µs with ns after the point survive exactly: 4458676983543.183 µs
    assert 4458676983543183 in set(t.gpu["start_ns"].tolist())


def test_pretty_and_compact_json_give_the_same_trace(hta_dir, tmp_path):
    doc = json.loads(gzip.decompress((hta_dir / "trace_filter_sampled_rank-1.json.gz").read_bytes()))
    pretty = tmp_path / "pretty_rank1.json"
    compact = tmp_path / "compact_rank1.json.gz"
    pretty.write_text(json.dumps(doc, indent=2))
    compact.write_bytes(gzip.compress(json.dumps(doc, separators=(",", ":")).encode()))
    a, b = load_kineto(pretty), load_kineto(compact)
    assert a.gpu[["start_ns", "end_ns", "stream"]].equals(b.gpu[["start_ns", "end_ns", "stream"]])
    assert rank_metrics(load_traces([pretty]).ranks[1]).overlap_ns == rank_metrics(
        load_traces([compact]).ranks[1]).overlap_ns


def _strip_dist(src: Path, dst: Path) -> None:
    doc = json.loads(gzip.decompress(src.read_bytes()))
    doc.pop("distributedInfo")
    dst.write_text(json.dumps(doc))


@pytest.mark.parametrize("fname,expected", [("trace_rank3.json", 3), ("x-rank-5.json", 5), ("rank_7.json", 7)])
def test_rank_from_file_name(hta_dir, tmp_path, fname, expected):
    p = tmp_path / fname
    _strip_dist(hta_dir / "trace_filter_sampled_rank-0.json.gz", p)
    t = load_kineto(p)
    assert (t.rank, t.rank_source, t.world_size) == (expected, "file name", None)


def test_explicit_rank_and_ambiguous_ranks(hta_dir, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _strip_dist(hta_dir / "trace_filter_sampled_rank-0.json.gz", a)
    _strip_dist(hta_dir / "trace_filter_sampled_rank-1.json.gz", b)
    assert load_traces([a], rank=4).rank_ids() == [4]
    with pytest.raises(MixedRunsError, match="cannot tell the ranks apart"):
        load_traces([a, b])


def test_directory_of_two_ranks(hta_dir, tmp_path):
    for r in (0, 1):
        name = f"trace_filter_sampled_rank-{r}.json.gz"
        (tmp_path / name).write_bytes((hta_dir / name).read_bytes())
    ts = load_traces([tmp_path])
    assert ts.rank_ids() == [0, 1] and ts.world_size == 128


def test_mixed_runs_refused(hta_dir):
    with pytest.raises(MixedRunsError, match="world sizes differ"):
        load_traces([hta_dir / "nccl_data.json.gz", hta_dir / "trace_diff_control.json.gz"])
    with pytest.raises(MixedRunsError, match="appears twice"):
        load_traces([hta_dir / "df_index_resolver.json.gz", hta_dir / "trace_diff_test.json.gz"])


def _digest(p: Path) -> tuple[str, float]:
    return hashlib.sha256(p.read_bytes()).hexdigest(), os.stat(p).st_mtime


def bad_inputs(hta_dir: Path, tmp: Path) -> dict[str, tuple[Path, str]]:
    raw = (hta_dir / "nccl_data.json.gz").read_bytes()
    text = gzip.decompress(raw)
    files = {
        "truncated gzip": (tmp / "cut.json.gz", raw[: len(raw) // 2], "truncated or corrupt gzip"),
        "truncated json": (tmp / "cut.json", text[: len(text) // 3], "truncated JSON"),
        "not a trace": (tmp / "notes.json", b"hello world", "not a trace"),
        "json, not kineto": (tmp / "other.json", b'{"foo": [1, 2, 3]}', "no traceEvents"),
        "wrong schema": (tmp / "schema.json", b'{"traceEvents": {"a": 1}}', "unexpected structure"),
        "empty": (tmp / "empty.json", b"", "empty file"),
    }
    out = {}
    for key, (path, data, msg) in files.items():
        path.write_bytes(data)
        out[key] = (path, msg)
    return out


def test_bad_input_is_one_clear_error_and_file_unchanged(hta_dir, tmp_path):
    for key, (path, msg) in bad_inputs(hta_dir, tmp_path).items():
        before = _digest(path)
        with pytest.raises(BadInputError) as info:
            load_traces([path])
        text = str(info.value)
        assert str(path) in text and msg in text, (key, text)
        assert "\n" not in text
        assert _digest(path) == before


def test_folder_of_several_runs_is_refused_with_the_runs_named(hta_dir, tmp_path):
    for run, name in (("a", "trace_filter_sampled_rank-0.json.gz"), ("b", "nccl_data.json.gz")):
        (tmp_path / run).mkdir()
        (tmp_path / run / name).write_bytes((hta_dir / name).read_bytes())
        (tmp_path / run / "manifest.json").write_text("{}")
    with pytest.raises(BadInputError, match="holds 2 runs, not one"):
        load_traces([tmp_path])
    assert load_traces([tmp_path / "a"]).rank_ids() == [0]  # one run folder: its manifest is skipped
