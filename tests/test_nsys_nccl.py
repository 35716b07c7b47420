"""Message sizes of NCCL kernels in nsys traces, from NCCL's NVTX payloads (analyzers/io/nsys_nccl.py).

tests/data/nccl-nvtx holds one 2-rank run of benchmarks/nccl_payload_probe.py on 2 x H200 (NCCL 2.28.9,
nsys 2025.3.1) exported three ways. The probe runs, for n = 4096, 262144 and 4194304 bf16 elements per
rank and 3 steps: all_reduce, all_gather_into_tensor, reduce_scatter_tensor, broadcast, all_to_all_single
(NCCL 2.28 runs it as a SendRecv kernel) and a send / recv pair (a SendRecv kernel launched at ncclGroupEnd).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyzers.io.load import load_traces
from analyzers.io.nsys_nccl import attach_payloads
from analyzers.report import analyze
from analyzers.timeline.model import make_gpu_table

ROOT = Path(__file__).parent.parent
DATA = ROOT / "tests" / "data" / "nccl-nvtx"
SIZES = (4096, 262144, 4194304)  # bf16 elements per rank
WORLD = 2


def _expected() -> dict[tuple[str, int], int]:
    """(op, S bytes) -> rows over both ranks and 3 steps, worked out from the probe by hand.

    S is NCCL's data size (nccl-tests): the whole buffer. all_reduce / broadcast: the n-element tensor
    (2n bytes); all-gather: its output, WORLD x n elements (4n bytes); reduce-scatter: its input, n
    elements (2n bytes); all_to_all_single of n elements and send / recv of n elements: 2n bytes, both
    SendRecv kernels (2 a size, step and rank)."""
    out: dict[tuple[str, int], int] = {}
    for n in SIZES:
        out[("AllReduce", 2 * n)] = 6
        out[("AllGather", 2 * n * WORLD)] = 6
        out[("ReduceScatter", 2 * n)] = 6
        out[("Broadcast", 2 * n)] = 6
        out[("SendRecv", 2 * n)] = 12
    return out


def _analyzed(folder: Path):
    traces = load_traces([folder])
    return traces, analyze(traces)


@pytest.fixture(scope="module")
def json_run():
    return _analyzed(DATA / "json")


def test_probe_sizes_group_size_and_bandwidth_from_json_payloads(json_run) -> None:
    traces, json_report = json_run
    rows = json_report.collectives.rows
    assert len(rows) == 108 and (rows["bytes"] > 0).all()
    counts = rows.groupby(["op", "bytes"]).size().to_dict()
    assert counts == _expected()
    assert (rows["group_size"] == 2).all()
    # NCCL's bus factors for 2 ranks: all-reduce 2 (n - 1) / n = 1, all-gather / reduce-scatter 1/2, others 1
    factor = rows["op"].map({"AllReduce": 1.0, "AllGather": 0.5, "ReduceScatter": 0.5, "Broadcast": 1.0,
                             "SendRecv": 1.0})
    # bandwidth on the transfer time: every kernel with a transfer has one (a kernel that only waited for
    # its peer, 2 here, has none)
    moved = (rows["transfer_ns"] > 0).to_numpy()
    assert moved.sum() >= 100 and (np.isfinite(rows["busbw_gbps"]) == moved).all()
    r = rows[moved]
    assert (r["busbw_gbps"] > 0).all()
    assert r["busbw_gbps"].to_numpy() == pytest.approx((r["algbw_gbps"] * factor[moved]).to_numpy())
    assert r["algbw_gbps"].to_numpy() == pytest.approx((r["bytes"] / r["transfer_ns"]).to_numpy())
    # reductions carry their element type in the kernel name; NCCL moves the rest as bytes
    assert set(rows.loc[rows["op"].isin(["AllReduce", "ReduceScatter"]), "dtype"]) == {"BFloat16"}
    assert set(rows.loc[~rows["op"].isin(["AllReduce", "ReduceScatter"]), "dtype"]) == {"Byte"}
    # two communicators (torch's lazy p2p one for send / recv), named alike on both ranks
    pgs = rows.groupby("rank")["pg"].apply(lambda s: sorted(set(s))).tolist()
    assert pgs[0] == pgs[1] and len(pgs[0]) == 2 and all(p.startswith("nccl:") for p in pgs[0])
    assert not json_report.collectives.notes
    assert not any("payload" in n for t in traces for n in t.notes)


def test_probe_groups_in_the_json_document(json_run) -> None:
    doc = json.loads(json.dumps(json_run[1].to_dict()["collectives"]))
    groups = {(g["op"], g["bytes_median"]): g for g in doc["groups"]}
    assert {(op, int(b)) for op, b in groups} == set(_expected())
    big = groups[("AllGather", 2 * SIZES[-1] * WORLD)]  # 16 MiB gathered
    assert big["size_bucket"] == "16 MiB-32 MiB" and big["n"] == 6
    assert big["busbw_median_gbps"] == pytest.approx(big["algbw_median_gbps"] / 2)
    assert doc["link_gbps"] == 450.0  # H200 NVLink 4, per direction


def test_binary_payloads_give_the_same_table(json_run) -> None:
    json_report = json_run[1]
    blobs = _analyzed(DATA / "blobs")[1].collectives.rows
    cols = ["rank", "start_ns", "op", "pg", "group_size", "dtype", "bytes", "busbw_gbps"]
    pd.testing.assert_frame_equal(blobs[cols].reset_index(drop=True),
                                  json_report.collectives.rows[cols].reset_index(drop=True))


def test_binary_payload_entries_without_offsets_sit_at_their_natural_alignment(tmp_path: Path, json_run) -> None:
    """NVTX places a schema entry whose offset is 0 / missing at the next offset aligned to its size:
    the message size (a size_t after the u64 communicator) at 8, where NCCL put it explicitly."""
    folder = _edited_copy(tmp_path, "UPDATE NVTX_PAYLOAD_SCHEMA_ENTRIES SET offset = NULL "
                                    "WHERE name = 'Message size [bytes]'", export="blobs")
    rows = _analyzed(folder)[1].collectives.rows
    assert list(rows["bytes"]) == list(json_run[1].collectives.rows["bytes"])


def test_default_export_has_no_sizes_and_says_why() -> None:
    traces, report = _analyzed(DATA / "default")
    rows = report.collectives.rows
    assert len(rows) == 108 and (rows["bytes"] == 0).all() and (rows["group_size"] == -1).all()
    assert set(rows["pg"]) == {""}
    for t in traces:
        assert any("NCCL NVTX ranges carry no payload" in n and "--include-json true" in n for n in t.notes)
    assert any("108 of 108 communication activities carry no message size" in n for n in report.collectives.notes)


def _edited_copy(tmp_path: Path, *sql: str, export: str = "json") -> Path:
    """An export (json, blobs) of both ranks with SQL statements applied to each copy."""
    out = tmp_path / "edited"
    out.mkdir()
    for r in (0, 1):
        target = out / f"rank{r}.sqlite"
        with gzip.open(DATA / export / f"rank{r}.sqlite.gz") as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        con = sqlite3.connect(target)
        for statement in sql:
            con.execute(statement)
        con.commit()
        con.close()
    return out


def test_look_alike_payloads_in_another_domain_give_no_sizes(tmp_path: Path) -> None:
    """The same ranges and JSON, recorded in a domain not named NCCL (another library's): no sizes."""
    folder = _edited_copy(tmp_path, "UPDATE NVTX_EVENTS SET domainId = 7 WHERE domainId = 1 AND eventType = 59")
    rows = analyze(load_traces([folder])).collectives.rows
    assert len(rows) == 108 and (rows["bytes"] == 0).all() and set(rows["pg"]) == {""}


def test_malformed_payloads_are_counted_not_fatal(tmp_path: Path) -> None:
    """Garbage JSON on every all-reduce call (9 a rank) and a wrong-typed size on every broadcast (9): those
    kernels lose their sizes, the others keep theirs, and a note counts the 18 unreadable payloads."""
    def named(api: str) -> str:
        return f"textId = (SELECT id FROM StringIds WHERE value = '{api}')"

    garbage, wrong_type = '{"NCCL communicator ID": [1, ', '{"Message size [bytes]": "8192"}'
    traces, report = _analyzed(_edited_copy(
        tmp_path, f"UPDATE NVTX_EVENTS SET jsonText = '{garbage}' WHERE {named('ncclAllReduce')}",
        f"UPDATE NVTX_EVENTS SET jsonText = '{wrong_type}' WHERE {named('ncclBroadcast')}"))
    rows = report.collectives.rows
    lost = rows["op"].isin(["AllReduce", "Broadcast"])
    assert (rows.loc[lost, "bytes"] == 0).all() and lost.sum() == 36
    assert (rows.loc[~lost, "bytes"] > 0).all()
    for t in traces:
        assert any(n.startswith("18 NCCL NVTX payloads could not be read") for n in t.notes)


def test_binary_payloads_that_do_not_fit_their_schema_are_counted(tmp_path: Path) -> None:
    """Binary payloads cut short (every all-gather's) or naming a schema the export lacks (every
    reduce-scatter's, stored as text that is no UTF-8): those kernels lose their sizes, 18 payloads a
    rank are counted, nothing fails."""
    def named(api: str) -> str:
        return f"textId = (SELECT id FROM StringIds WHERE value = '{api}')"

    traces, report = _analyzed(_edited_copy(
        tmp_path, f"UPDATE NVTX_EVENTS SET binaryData = substr(binaryData, 1, 40) WHERE {named('ncclAllGather')}",
        "UPDATE NVTX_EVENTS SET binaryData = zeroblob(8) || x'ffffff7f00000000' || substr(binaryData, 17) "
        f"WHERE {named('ncclReduceScatter')}", export="blobs"))
    rows = report.collectives.rows
    lost = rows["op"].isin(["AllGather", "ReduceScatter"])
    assert (rows.loc[lost, "bytes"] == 0).all() and lost.sum() == 36 and (rows.loc[~lost, "bytes"] > 0).all()
    for t in traces:
        assert any(n.startswith("18 NCCL NVTX payloads could not be read") for n in t.notes)


@pytest.mark.parametrize("export", ["json", "blobs"])
def test_rank_from_the_communicator_set_up_payload(tmp_path: Path, export: str) -> None:
    """Without the recorded environment, each file's rank and world size come from its
    ncclCommInitRankConfig payload ("Rank", "No. of ranks"), JSON or binary alike."""
    folder = _edited_copy(tmp_path, "DELETE FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_%:ENVIRONMENT_VARIABLE'",
                          export=export)
    traces = load_traces([folder])
    assert [(t.rank, t.world_size, t.rank_source) for t in traces] == [(0, 2, "NCCL NVTX payload"),
                                                                       (1, 2, "NCCL NVTX payload")]
    assert [Path(t.source).name for t in traces] == ["rank0.sqlite", "rank1.sqlite"]


# ---------------------------------------------------------------------------------------------
# Tying calls to kernels, by hand: one thread, one NCCL kernel launched with correlation id 5
# ---------------------------------------------------------------------------------------------

KERNEL = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)"


def _one_kernel() -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame]:
    gpu = make_gpu_table(1, start_ns=[300], end_ns=[400], correlation=[5], kind=["kernel"])
    runtime = pd.DataFrame({"tid": [1], "start_ns": [150], "end_ns": [160], "correlation": [5]})
    return gpu, np.array([KERNEL], dtype=object), runtime


def _calls(rows: list[tuple[int, int, str, int, int]]) -> pd.DataFrame:
    """(start, end, api, comm, size) on thread 1 of process 9."""
    return pd.DataFrame({"pid": 9, "tid": 1, "start_ns": [r[0] for r in rows], "end_ns": [r[1] for r in rows],
                         "api": [r[2] for r in rows], "comm": [r[3] for r in rows],
                         "size": [r[4] for r in rows], "nranks": -1})


def test_a_group_of_one_call_gives_its_size_to_the_kernel_launched_at_group_end() -> None:
    gpu, names, runtime = _one_kernel()
    calls = _calls([(100, 101, "GroupStart", -1, -1), (102, 103, "Send", 0xAB, 4096),
                    (110, 200, "GroupEnd", -1, -1)])
    assert attach_payloads(gpu, names, runtime, calls, {0xAB: 8}) == []
    assert (gpu.at[0, "msg_nelems"], gpu.at[0, "out_nelems"], gpu.at[0, "dtype"]) == (4096, 4096, "Byte")
    assert (gpu.at[0, "group_size"], gpu.at[0, "pg"]) == (8, "nccl:00000000000000ab")


def test_a_group_of_several_calls_leaves_the_fused_kernel_unknown() -> None:
    gpu, names, runtime = _one_kernel()
    calls = _calls([(100, 101, "GroupStart", -1, -1), (102, 103, "Send", 0xAB, 4096),
                    (104, 105, "Recv", 0xAB, 4096), (110, 200, "GroupEnd", -1, -1)])
    notes = attach_payloads(gpu, names, runtime, calls, {0xAB: 8})
    assert gpu.at[0, "msg_nelems"] == -1 and gpu.at[0, "pg"] == ""
    assert notes and notes[0].startswith("1 NCCL kernels were launched at the end of an ncclGroupStart")


def test_a_launch_outside_every_call_or_on_another_thread_takes_nothing() -> None:
    gpu, names, runtime = _one_kernel()
    calls = _calls([(100, 140, "AllReduce", 0xAB, 4096)])  # ends before the launch at 150
    assert attach_payloads(gpu, names, runtime, calls, {0xAB: 2}) == [] and gpu.at[0, "msg_nelems"] == -1
    calls = _calls([(100, 200, "AllReduce", 0xAB, 4096)]).assign(tid=2)
    attach_payloads(gpu, names, runtime, calls, {0xAB: 2})
    assert gpu.at[0, "msg_nelems"] == -1


def test_all_gather_on_a_communicator_of_unknown_size_has_no_size() -> None:
    gpu, _, runtime = _one_kernel()
    names = np.array(["ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)"])
    notes = attach_payloads(gpu, names, runtime, _calls([(100, 200, "AllGather", 0xCD, 4096)]), {})
    assert gpu.at[0, "msg_nelems"] == -1 and gpu.at[0, "out_nelems"] == -1
    assert notes and "communicators whose size the export does not hold" in notes[0]
    gpu, _, runtime = _one_kernel()
    attach_payloads(gpu, names, runtime, _calls([(100, 200, "AllGather", 0xCD, 4096)]), {0xCD: 4})
    assert (gpu.at[0, "msg_nelems"], gpu.at[0, "out_nelems"], gpu.at[0, "group_size"]) == (4096, 16384, 4)


# ---------------------------------------------------------------------------------------------
# Exports: `nsys export --include-json true`, retried without the flag where nsys does not know it
# ---------------------------------------------------------------------------------------------

def _fake_nsys(tmp_path: Path, knows_json: bool, export: Path | None = None) -> tuple[Path, Path]:
    """A stand-in nsys that logs its arguments, refuses `--include-json` unless knows_json, and writes
    export (or a line of text) to its --output."""
    calls = tmp_path / "calls.txt"
    reject = ('case "$*" in *--include-json*) echo "unrecognised option \'--include-json\'" >&2; exit 1;; esac\n'
              if not knows_json else "")
    script = tmp_path / "bin" / "nsys"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n{reject}'
                      'while [ $# -gt 0 ]; do [ "$1" = "--output" ] && out="$2"; shift; done\n'
                      + (f'cp {export} "$out"\n' if export else 'echo export > "$out"\n'))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, calls


@pytest.mark.parametrize("knows_json", [True, False])
def test_runner_export_asks_for_json_and_falls_back(tmp_path: Path, knows_json: bool) -> None:
    from runners import launch

    script, calls = _fake_nsys(tmp_path, knows_json)
    out = tmp_path / "run"
    out.mkdir()
    (out / "rank0.nsys-rep").write_text("report")
    traces, with_json = launch._export_nsys(str(script), out, True, dict(os.environ))
    assert traces == {0: out / "rank0.sqlite"} and with_json is knows_json
    lines = calls.read_text().splitlines()
    assert "--include-json true" in lines[0]
    if knows_json:
        assert len(lines) == 1
    else:  # refused: exported again without the flag
        assert len(lines) == 2 and "--include-json" not in lines[1]


def test_report_export_without_json_flag_is_retried_and_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A .nsys-rep read through an nsys that refuses `--include-json`: exported again without it, and the
    trace says its export lacks the payloads."""
    from analyzers.io.nsys import load_nsys

    from .conftest import NSYS_TRACES

    monkeypatch.setenv("OVERLAPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    script, calls = _fake_nsys(tmp_path, False, NSYS_TRACES / "nvfuser_report1.sqlite")
    monkeypatch.setenv("NSYS", str(script))
    rep = tmp_path / "nvfuser_report1.nsys-rep"
    shutil.copy2(NSYS_TRACES / rep.name, rep)
    (t,) = load_nsys(rep)
    lines = calls.read_text().splitlines()
    assert len(lines) == 2 and "--include-json true" in lines[0] and "--include-json" not in lines[1]
    assert any("does not know `--include-json`" in n for n in t.notes)
