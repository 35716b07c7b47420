"""The collectives table: message bytes, wait / transfer split, NCCL's bandwidth formulas, groups, link peaks."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from analyzers.crossrank.collective_table import CollectiveParams, bucket_floor, size_bucket
from analyzers.crossrank.link_peaks import bus_factor, dtype_bytes, link_peak_gbps
from analyzers.io.load import load_traces
from analyzers.report import analyze
from tests.trace_files import GEMM, NCCL_ALLREDUCE, Kineto

ROOT = Path(__file__).parent.parent
MIB4 = 4 * 2**20  # 1 Mi float32 elements
ARGS = {"In msg nelems": 2**20, "Out msg nelems": 2**20, "dtype": "Float", "Group size": 2,
        "Process Group Name": "0", "Collective name": "allreduce"}


def test_nccl_bus_factors():
    assert bus_factor("AllReduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("AllGather", 4) == pytest.approx(3 / 4)
    assert bus_factor("ReduceScatter", 2) == pytest.approx(1 / 2)
    assert bus_factor("AllToAll", 64) == pytest.approx(63 / 64)
    assert bus_factor("Broadcast", 8) == bus_factor("SendRecv", None) == 1.0
    assert bus_factor("AllReduce", None) is None and bus_factor("Other", 8) is None


def test_link_peaks_and_dtypes():
    assert link_peak_gbps("NVIDIA H100 80GB HBM3")[0] == 450
    assert link_peak_gbps("NVIDIA H200")[0] == 450
    assert link_peak_gbps("NVIDIA H100 PCIe")[0] == 64
    assert link_peak_gbps("NVIDIA A100-SXM4-80GB")[0] == 300
    assert link_peak_gbps("NVIDIA B200")[0] == 900
    assert link_peak_gbps("AMD Instinct MI300X")[0] == 448
    assert link_peak_gbps("NVIDIA H800")[0] == 200
    assert link_peak_gbps("Tesla T4") is None
    assert (dtype_bytes("BFloat16"), dtype_bytes("Float"), dtype_bytes("Long"), dtype_bytes("Float8_e4m3fn")) == \
        (2, 4, 8, 1)
    assert dtype_bytes("Mystery") is None


def test_size_buckets():
    assert size_bucket(MIB4) == "4 MiB-8 MiB"
    assert size_bucket(MIB4 - 1) == "2 MiB-4 MiB"
    assert size_bucket(424) == "256 B-512 B"
    assert size_bucket(0) == "unknown"
    assert bucket_floor("4 MiB-8 MiB") == MIB4 and bucket_floor("unknown") == -1


def _two_ranks(tmp_path: Path) -> list[Path]:
    """Three all-reduces of 4 MiB on two ranks (µs): c1 r0 [100, 300) r1 [150, 300); c2 both [400, 500);
    c3 r0 [600, 700) r1 [620, 700). Rank 0 computes [200, 300) and [600, 640) on another stream."""
    paths = []
    for rank, spans in ((0, [(100, 300), (400, 500), (600, 700)]), (1, [(150, 300), (400, 500), (620, 700)])):
        k = Kineto(rank=rank, world_size=2)
        for s, e in spans:
            k.kernel(s, e, NCCL_ALLREDUCE, launch=s - 5, stream=20, **ARGS)
        if rank == 0:
            k.kernel(200, 300, GEMM, launch=190, stream=7)
            k.kernel(600, 640, GEMM, launch=590, stream=7)
        paths.append(k.write(tmp_path / f"rank{rank}.json"))
    return paths


def test_hand_made_two_ranks(tmp_path):
    traces = load_traces(_two_ranks(tmp_path))
    table = analyze(traces, collective_params=CollectiveParams(link_gbps=100.0)).collectives
    rows = table.rows.sort_values(["rank", "start_ns"]).reset_index(drop=True)
    assert list(rows["bytes"]) == [MIB4] * 6
    assert list(rows["op"]) == ["AllReduce"] * 6 and list(rows["group_size"]) == [2] * 6
    # peer wait: c1 rank 0 waited 50 µs for rank 1, c3 20 µs; rank 1 never waited
    assert list(rows["wait_ns"]) == [50_000, 0, 20_000, 0, 0, 0]
    assert list(rows["transfer_ns"]) == [150_000, 100_000, 80_000, 150_000, 100_000, 80_000]
    # algbw = S / transfer (bytes per ns = GB/s); busbw = algbw * 2 (n - 1) / n = algbw for n = 2
    expect = [MIB4 / 150_000, MIB4 / 100_000, MIB4 / 80_000] * 2
    assert rows["algbw_gbps"].to_numpy() == pytest.approx(expect)
    assert rows["busbw_gbps"].to_numpy() == pytest.approx(expect)
    # compute beside the transfer: c1 rank 0 [150, 300) has [200, 300): 2/3; c3 [620, 700) has [620, 640): 1/4
    assert rows["overlap_share"].to_numpy() == pytest.approx([2 / 3, 0, 0.25, 0, 0, 0])
    assert list(rows["overlapped"]) == [True, False, False, False, False, False]
    g = table.groups
    assert len(g) == 1
    r = g.iloc[0]
    assert (r["op"], r["size_bucket"], r["n"], r["n_overlapped"]) == ("AllReduce", "4 MiB-8 MiB", 6, 1)
    # six busbw values: 27.96, 27.96, 41.94, 41.94, 52.43, 52.43 -> median 41.94; alone: all but rank 0's c1
    assert r["busbw_median_gbps"] == pytest.approx(MIB4 / 100_000)
    assert r["busbw_alone_median_gbps"] == pytest.approx(MIB4 / 100_000)
    assert r["busbw_overlapped_median_gbps"] == pytest.approx(MIB4 / 150_000)
    assert r["wait_median_ns"] == 0 and r["transfer_median_ns"] == 100_000
    assert r["link_fraction"] == pytest.approx(MIB4 / 100_000 / 100)
    assert (table.link_gbps, table.link_source) == (100.0, "--link-gbps")
    per_rank = table.rank_groups
    assert list(per_rank["rank"]) == [0, 1] and list(per_rank["n_overlapped"]) == [1, 0]
    doc = json.loads(json.dumps(analyze(traces).to_dict()["collectives"]))
    assert doc["n_rows"] == 6 and doc["groups"][0]["n"] == 6 and doc["link_gbps"] is None


def test_unmatched_collectives_keep_the_whole_kernel_as_transfer(tmp_path):
    traces = load_traces([_two_ranks(tmp_path)[0]])
    table = analyze(traces).collectives
    assert not table.rows["wait_known"].any()
    assert list(table.rows.sort_values("start_ns")["transfer_ns"]) == [200_000, 100_000, 100_000]
    assert any("no peer wait (not matched across ranks" in n for n in table.notes)


def _raw_allgathers(path: Path) -> list[dict]:
    with gzip.open(path) as f:
        ev = json.load(f)["traceEvents"]
    return sorted((e for e in ev if e.get("cat") == "kernel" and "AllGather" in e["name"]), key=lambda e: e["ts"])


def test_sample_all_gather_sizes_and_bandwidth():
    """sample_traces/ag-gemm/baseline (2 x H200): every all-gather gathers 2 x 64 Mi bf16 = 256 MiB."""
    folder = ROOT / "sample_traces" / "ag-gemm" / "baseline"
    report = analyze(load_traces([folder]))
    table = report.collectives
    rows = table.rows[table.rows["rank"] == 0].sort_values("start_ns")
    raw = _raw_allgathers(folder / "rank0.json.gz")
    assert len(rows) == len(raw) == 3
    for (_, r), e in zip(rows.iterrows(), raw, strict=True):
        a = e["args"]
        assert r["bytes"] == a["Out msg nelems"] * 2 == 2**28  # the gathered buffer, as nccl-tests counts it
        assert r["group_size"] == a["Group size"] == 2
        assert r["transfer_ns"] + r["wait_ns"] == r["dur_ns"]
        assert r["algbw_gbps"] == pytest.approx(2**28 / r["transfer_ns"])
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] / 2)  # (n - 1) / n
    assert table.link_gbps == 450.0 and "H200" in table.link_source
    assert table.groups.iloc[0]["link_fraction"] == pytest.approx(table.groups.iloc[0]["busbw_median_gbps"] / 450)
    # bus bandwidth on the transfer time is never above what the GPU's links carry
    assert (table.rows["link_fraction"].dropna() < 1).all()


def test_public_nccl_trace_link_from_the_gpu_model():
    """HTA's nccl_data (A100, 21 NCCL kernels with sizes): link 300 GB/s, every kernel sized."""
    table = analyze(load_traces([ROOT / "tests/data/public/hta/nccl_data.json.gz"])).collectives
    assert len(table.rows) == 21 and (table.rows["bytes"] > 0).all()
    assert table.link_gbps == 300.0 and "A100" in table.link_source
    assert set(table.groups["op"]) == {"AllReduce", "Broadcast"}
    assert int(table.groups["n"].sum()) == 21
    assert np.isfinite(table.rows["busbw_gbps"]).all()


def test_diff_compares_bandwidth_per_operation_and_size(tmp_path):
    from analyzers.diff import diff_reports

    a_paths = _two_ranks(tmp_path)
    b_dir = tmp_path / "b"
    b_dir.mkdir()
    # B: the same all-reduces, each half as long on both ranks (the compute unchanged): busbw doubles
    for p in a_paths:
        doc = json.loads(p.read_text())
        for e in doc["traceEvents"]:
            if e["name"] == NCCL_ALLREDUCE:
                e["dur"] = e["dur"] / 2
        (b_dir / p.name).write_text(json.dumps(doc))
    ta, tb = load_traces(a_paths), load_traces(sorted(b_dir.iterdir()))
    ra, rb = analyze(ta), analyze(tb)
    d = diff_reports(ra, rb, ta, tb)
    row = d.collectives.iloc[0]
    assert (row["op"], row["size_bucket"], row["n_a"], row["n_b"]) == ("AllReduce", "4 MiB-8 MiB", 6, 6)
    assert row["busbw_median_gbps_a"] == pytest.approx(ra.collectives.groups.iloc[0]["busbw_median_gbps"])
    assert row["busbw_median_gbps_b"] == pytest.approx(rb.collectives.groups.iloc[0]["busbw_median_gbps"])
    assert row["busbw_delta_gbps"] == pytest.approx(row["busbw_median_gbps_b"] - row["busbw_median_gbps_a"])
    assert row["busbw_rel"] > 0.5  # halved kernels (waits halve too): the bandwidth more than 1.5x
    assert d.to_dict()["collectives"][0]["op"] == "AllReduce"


def test_diff_keeps_groups_found_on_one_side_only():
    from analyzers.diff.collectives import collective_deltas

    a = analyze(load_traces([ROOT / "tests/data/public/hta/nccl_data.json.gz"])).collectives
    b = analyze(load_traces([ROOT / "sample_traces/ag-gemm/baseline"])).collectives
    d = collective_deltas(a, b)
    assert len(d) == len(a.groups) + len(b.groups)  # no (op, size) in common
    gathered = d[d["op"] == "AllGather"].iloc[0]
    assert gathered["n_a"] == 0 and np.isnan(gathered["busbw_median_gbps_a"]) and np.isnan(gathered["busbw_rel"])


def test_export_collectives_csv_and_html(tmp_path):
    import csv
    import subprocess
    import sys

    folder = ROOT / "sample_traces" / "ag-gemm" / "baseline"
    out_csv, out_html = tmp_path / "c.csv", tmp_path / "r.html"
    res = subprocess.run([sys.executable, "-m", "overlapscope", "export", str(folder), "--collectives-csv",
                          str(out_csv), "--html", str(out_html), "--link-gbps", "300"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(out_csv.open()))
    table = analyze(load_traces([folder]), collective_params=CollectiveParams(link_gbps=300)).collectives
    assert len(rows) == len(table.rows) == 6
    assert [int(r["bytes"]) for r in rows] == list(table.rows["bytes"])
    assert [float(r["link_fraction"]) for r in rows] == pytest.approx(list(table.rows["busbw_gbps"] / 300))
    page = out_html.read_text()
    assert "Collectives: size and bandwidth" in page and "link peak 300 GB/s per direction (--link-gbps)" in page
    # refused before any work: the same file again without --overwrite
    again = subprocess.run([sys.executable, "-m", "overlapscope", "export", str(folder), "--collectives-csv",
                            str(out_csv)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert again.returncode == 2 and "exists" in again.stderr


def test_perfetto_bandwidth_track():
    from analyzers.export.perfetto import perfetto_data, pid_of

    traces = load_traces([ROOT / "sample_traces" / "ag-gemm" / "baseline"])
    report = analyze(traces)
    data = perfetto_data(traces, report)
    tracks = data.tracks[data.tracks["name"].str.startswith("collective bandwidth")]
    spans = data.spans[data.spans["cat"] == "bandwidth"]
    assert len(spans) == len(report.collectives.rows) == 6
    for rank in (0, 1):
        mine = spans[spans["pid"] == pid_of(rank)]
        rows = report.collectives.rows[report.collectives.rows["rank"] == rank]
        assert set(mine["tid"]) <= set(tracks.loc[tracks["pid"] == pid_of(rank), "tid"])
        assert sorted(mine["end_ns"] - mine["start_ns"]) == sorted(rows["transfer_ns"])
        assert sorted(a["bytes"] for a in mine["args"]) == sorted(rows["bytes"])
        assert all(n.startswith("AllGather 256 MiB-512 MiB: ") for n in mine["name"])


def test_document_parts_made_rank_by_rank_are_those_of_the_whole_table():
    """The groups, per-rank groups, notes' counts and first rows, made one rank at a time without holding the
    table, equal what the whole table (built on first reading `rows`) gives; the first rows span ranks."""
    import pandas as pd

    from analyzers.crossrank.collective_table import _groups, collective_table

    traces = load_traces([ROOT / "sample_traces" / "fsdp" / "baseline"])
    rep = analyze(traces)
    n0 = int((rep.collectives.rows["rank"] == traces.rank_ids()[0]).sum())
    table = collective_table(traces, rep.cross_rank, CollectiveParams(max_listed=n0 + 3))
    assert table._rows is None  # not built until read
    whole = table.rows
    assert table.n_rows == len(whole) and whole["rank"].nunique() == len(traces.rank_ids()) > 1
    pd.testing.assert_frame_equal(table.head, whole.head(n0 + 3))
    assert table.head["rank"].nunique() == 2
    pd.testing.assert_frame_equal(table.groups, _groups(whole, [], table.link_gbps), check_exact=True)
    pd.testing.assert_frame_equal(table.rank_groups, _groups(whole, ["rank"], table.link_gbps), check_exact=True)
    pd.testing.assert_frame_equal(whole, rep.collectives.rows, check_exact=True)
