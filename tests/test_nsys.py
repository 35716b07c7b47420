"""Nsight Systems loader: real exports from tests/data/public/nsys, plus small hand-built
exports for schema variants the public files do not cover."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sqlite3
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyzers.errors import BadInputError
from analyzers.io import nsys_rep
from analyzers.io.nsys import load_nsys
from analyzers.io.nsys_rep import is_nsys_rep, nsys_rep_to_sqlite, nsys_rep_version
from analyzers.timeline.classify import classify_trace, load_rules
from analyzers.timeline.collectives import collective_name_from_kernel, collective_names
from analyzers.timeline.model import RankTrace

from .conftest import NSYS_TRACES

NSYS_DIR = NSYS_TRACES
MFU_BEFORE = NSYS_DIR / "mfu_2gpu_before.sqlite"
H100 = NSYS_DIR / "h100_2gpu_1s.sqlite"
PIPIT = NSYS_DIR / "pipit_perlmutter-cloverleaf-cuda.sqlite"
NVFUSER_SQLITE = NSYS_DIR / "nvfuser_report1.sqlite"
NVFUSER_REP = NSYS_DIR / "nvfuser_report1.nsys-rep"


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Exports of .nsys-rep go to a per-test cache dir, never the user's."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("OVERLAPSCOPE_CACHE_DIR", str(cache))
    monkeypatch.delenv("NSYS", raising=False)
    return cache


def runtime_names(t: RankTrace) -> np.ndarray:
    return t.names_of(t.runtime["name_id"].to_numpy())


def gpu_names(t: RankTrace) -> np.ndarray:
    return t.names_of(t.gpu["name_id"].to_numpy())


def brute_force_overlap(t: RankTrace) -> tuple[int, int, int]:
    """(comm, compute, overlap) ns by marking every nanosecond offset on a boolean timeline."""
    g = t.gpu
    lo, hi = int(g["start_ns"].min()), int(g["end_ns"].max())
    comm = np.zeros(hi - lo, dtype=bool)
    comp = np.zeros(hi - lo, dtype=bool)
    for s, e, c in zip(g["start_ns"], g["end_ns"], g["category"], strict=True):  # reference only
        if c == "comm":
            comm[s - lo:e - lo] = True
        elif c == "compute":
            comp[s - lo:e - lo] = True
    return int(comm.sum()), int(comp.sum()), int((comm & comp).sum())


# ---------------------------------------------------------------------------------------------
# Acceptance points on real exports
# ---------------------------------------------------------------------------------------------

def test_mfu_two_ranks_sendrecv_on_compute_stream_overlap_zero() -> None:
    traces = load_nsys(MFU_BEFORE)
    assert [t.rank for t in traces] == [0, 1]
    assert len({t.pid for t in traces}) == 2
    assert all(t.rank_source == "process order" and t.world_size == 2 for t in traces)
    assert all(t.fmt == "nsys" and t.source == str(MFU_BEFORE) for t in traces)

    sendrecv = sum(int(np.char.startswith(gpu_names(t).astype(str), "ncclDevKernel_SendRecv").sum())
                   for t in traces)
    assert sendrecv == 66
    assert sum(int((t.gpu["coll_name"] == "SendRecv").sum()) for t in traces) == 66

    from analyzers.overlap.metrics import rank_metrics

    for t in traces:
        classify_trace(t, load_rules())
        comm_rows = t.gpu[t.gpu["category"] == "comm"]
        comp_rows = t.gpu[t.gpu["category"] == "compute"]
        # The communication runs on the compute stream, so nothing can overlap.
        assert set(comm_rows["stream"]) <= set(comp_rows["stream"])
        comm, compute, overlap = brute_force_overlap(t)
        assert comm > 0 and compute > 0
        assert overlap == 0
        m = rank_metrics(t)
        assert (m.comm_ns, m.compute_ns, m.overlap_ns) == (comm, compute, overlap)
        assert m.overlap_ratio == 0.0


def test_pipit_device_synchronize_count_and_rank_from_environment() -> None:
    (t,) = load_nsys(PIPIT)
    names = runtime_names(t)
    assert int((names == "cudaDeviceSynchronize").sum()) == 1312
    assert not any(re.search(r"_v\d+$", n) for n in set(names))  # Kineto's spelling
    # One MPI rank per report: PMI_RANK / PMI_SIZE from the launched process's environment.
    assert (t.rank, t.world_size, t.rank_source) == (0, 1, "environment PMI_RANK")
    assert len(t.sync_events) == 1312
    assert t.devices and all("A100" in n for n in t.devices.values())
    assert t.meta["nsys_version"].startswith("2024.5")
    # A lazy export without memsets or NVTX: the loader says what is missing instead of failing.
    assert any("NVTX_EVENTS" in n for n in t.notes)
    assert t.host_ops.empty and t.sets.empty


def test_h100_two_ranks_eight_stream_synchronize() -> None:
    traces = load_nsys(H100)
    assert len(traces) == 2
    assert sum(int((runtime_names(t) == "cudaStreamSynchronize").sum()) for t in traces) == 8
    assert all(len(t.host_ops) > 0 and set(t.host_ops["kind"]) == {"nvtx"} for t in traces)
    assert sum(len(t.host_ops) for t in traces) == 16782


def test_nsys_rep_without_nsys_names_version_and_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nsys_rep, "find_nsys", lambda: None)
    assert is_nsys_rep(NVFUSER_REP) and not is_nsys_rep(NVFUSER_SQLITE)
    with pytest.raises(BadInputError) as info:
        load_nsys(NVFUSER_REP)
    msg = str(info.value)
    assert "nsys 2024.6" in msg
    assert "nsys export --type sqlite --include-json true --output " in msg and str(NVFUSER_REP) in msg
    assert "\n" not in msg
    assert nsys_rep_version(NVFUSER_REP).startswith("2024.6")


# ---------------------------------------------------------------------------------------------
# .nsys-rep through a stand-in nsys: cache location, reuse, source label, failures
# ---------------------------------------------------------------------------------------------

def fake_nsys(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "bin" / "nsys"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_nsys_rep_exported_once_into_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               private_cache: Path) -> None:
    calls = tmp_path / "calls.txt"
    script = fake_nsys(tmp_path, f"""echo "$@" >> {calls}
while [ $# -gt 0 ]; do [ "$1" = "--output" ] && out="$2"; shift; done
cp {NVFUSER_SQLITE} "$out"
""")
    monkeypatch.setenv("NSYS", str(script))
    in_dir = tmp_path / "in"
    in_dir.mkdir()
    rep = in_dir / NVFUSER_REP.name
    shutil.copy2(NVFUSER_REP, rep)

    (t,) = load_nsys(rep)
    assert t.source == str(rep) and len(t.kernels) == 19
    assert Path(t.meta["sqlite"]).is_relative_to(private_cache)
    assert sorted(p.name for p in in_dir.iterdir()) == [rep.name]  # nothing written beside the input
    assert calls.read_text().startswith("export --type sqlite --include-json true --output ")

    # The dispatcher's route (export, then load the export) still labels traces by the report.
    exported = nsys_rep_to_sqlite(rep)
    (t2,) = load_nsys(exported)
    assert t2.source == str(rep)
    assert len(calls.read_text().splitlines()) == 1  # cached: keyed by path and contents

    os.utime(rep, ns=(rep.stat().st_atime_ns, rep.stat().st_mtime_ns + 10**9))
    nsys_rep_to_sqlite(rep)
    assert len(calls.read_text().splitlines()) == 1  # touched, same bytes: the export stands
    st = rep.stat()
    data = bytearray(rep.read_bytes())
    data[-1] ^= 1
    rep.write_bytes(bytes(data))
    os.utime(rep, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime, other bytes
    nsys_rep_to_sqlite(rep)
    assert len(calls.read_text().splitlines()) == 2  # a changed report is exported again


def test_nsys_rep_export_failure_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             private_cache: Path) -> None:
    script = fake_nsys(tmp_path, 'echo "Error: report is from a newer version" >&2\nexit 1\n')
    monkeypatch.setenv("NSYS", str(script))
    with pytest.raises(BadInputError, match="nsys export failed .*newer version"):
        load_nsys(NVFUSER_REP)
    assert not list(private_cache.rglob("*.sqlite"))  # no half-written export left to be reused


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------

def test_sqlite_that_is_not_an_nsys_export(tmp_path: Path) -> None:
    p = tmp_path / "other.sqlite"
    with sqlite3.connect(p) as conn:
        conn.execute("CREATE TABLE people (id INTEGER, name TEXT)")
        conn.execute("INSERT INTO people VALUES (1, 'ada')")
    conn.close()
    with pytest.raises(BadInputError, match="not an Nsight Systems export"):
        load_nsys(p)


def test_text_file_is_bad_input(tmp_path: Path) -> None:
    p = tmp_path / "notes.sqlite"
    p.write_text("just some text\n")
    with pytest.raises(BadInputError, match="not an SQLite file"):
        load_nsys(p)


@pytest.mark.parametrize("fraction", [0.97, 0.5, 0.02])
def test_truncated_export_is_bad_input(tmp_path: Path, fraction: float) -> None:
    data = MFU_BEFORE.read_bytes()
    p = tmp_path / "cut.sqlite"
    p.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(BadInputError, match="truncated"):
        load_nsys(p)


def test_truncated_export_without_page_count_is_bad_input(tmp_path: Path) -> None:
    """SQLite itself must notice when the header cannot tell (its page count zeroed)."""
    data = bytearray(MFU_BEFORE.read_bytes()[: len(MFU_BEFORE.read_bytes()) // 2])
    data[28:32] = bytes(4)
    p = tmp_path / "cut.sqlite"
    p.write_bytes(bytes(data))
    with pytest.raises(BadInputError, match="corrupt or truncated"):
        load_nsys(p)


def test_export_without_cuda_activity_is_bad_input(tmp_path: Path) -> None:
    p = tmp_path / "nvtx_only.sqlite"
    with sqlite3.connect(p) as conn:
        conn.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, text TEXT, globalTid INT)")
        conn.execute("INSERT INTO NVTX_EVENTS VALUES (1, 2, 59, 'step', 4294967297)")
    conn.close()
    with pytest.raises(BadInputError, match="no CUDA activity"):
        load_nsys(p)


def test_input_left_unchanged(tmp_path: Path) -> None:
    p = tmp_path / MFU_BEFORE.name
    shutil.copy2(MFU_BEFORE, p)
    p.chmod(0o644)  # writable, so a write would succeed if the loader attempted one
    before = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns, p.stat().st_size)
    load_nsys(p)
    after = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns, p.stat().st_size)
    assert before == after
    assert sorted(x.name for x in tmp_path.iterdir() if x.name != "cache") == [p.name]  # no -wal/-shm


# ---------------------------------------------------------------------------------------------
# Processes and correlation ids
# ---------------------------------------------------------------------------------------------

def test_correlation_ids_joined_within_each_process() -> None:
    traces = load_nsys(MFU_BEFORE)
    rt_corr = [set(t.runtime["correlation"]) for t in traces]
    assert rt_corr[0] & rt_corr[1], "the file must hold colliding ids for this test to mean anything"
    for t in traces:
        assert set(t.runtime["pid"]) == {t.pid}
        rt = t.runtime.set_index("correlation")
        k = t.kernels
        joined = k["correlation"].isin(rt.index).to_numpy()
        launchers = t.names_of(rt.loc[k["correlation"][joined], "name_id"].to_numpy())
        # Within its own process every kernel maps to a launch call that started before it ...
        assert all(re.search(r"Launch", n) for n in launchers), set(launchers)
        assert (rt.loc[k["correlation"][joined], "start_ns"].to_numpy() <= k["start_ns"][joined].to_numpy()).all()
        # ... except those launched before the export's window began.
        assert (k["correlation"][~joined] < min(rt.index)).all()
        assert joined.mean() > 0.99


def test_memcpy_and_memset_named_like_kineto() -> None:
    traces = load_nsys(H100)
    rules = load_rules()
    for t in traces:
        classify_trace(t, rules)
        copies = set(t.names_of(t.copies["name_id"].unique()))
        assert copies == {"Memcpy DtoD (Device -> Device)", "Memcpy DtoH (Device -> Pinned)",
                          "Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pinned -> Device)"}
        assert set(t.names_of(t.sets["name_id"].unique())) == {"Memset (Device)"}
        assert set(t.copies["category"]) == {"copy"} and set(t.sets["category"]) == {"memset"}
        assert (t.copies["bytes"] > 0).all()
        assert t.gpu["start_ns"].is_monotonic_increasing


def test_gpu_table_typed_like_the_model() -> None:
    (t,) = load_nsys(NVFUSER_SQLITE)
    assert t.gpu["start_ns"].dtype == np.int64 and t.gpu["device"].dtype == np.int32
    assert (t.gpu["end_ns"] >= t.gpu["start_ns"]).all()
    assert t.devices == {0: "NVIDIA H200"}
    assert t.meta["nsys_version"] == "2024.6.2.25" and t.meta["export_schema_version"] == "3.16.1"
    assert t.rank_source == "default"  # one process, no rank variables: the rank is not known
    assert len(t.host_ops) == 652 and (t.host_ops["end_ns"] >= t.host_ops["start_ns"]).all()


# ---------------------------------------------------------------------------------------------
# Schema variants, hand-built (older column layouts, per-process environment, NCCL payloads)
# ---------------------------------------------------------------------------------------------

VM = 1 << 48
LAUNCHER = 100  # pid of the API-only launcher process in hand-built exports


def gpid(pid: int) -> int:
    return VM | (pid << 24)


def gtid(pid: int, tid: int) -> int:
    return gpid(pid) | tid


def build_export(path: Path, *, pid_in_kernels: bool = True, env: dict[int, int] | None = None,
                 payload_ranks: dict[int, list[tuple[int, int]]] | None = None,
                 pids: tuple[int, ...] = (200, 300)) -> None:
    """An export in an older layout: kernel names as text, NVTX `text` only, no ENUM tables."""
    strings = {1: "cudaLaunchKernel_v7000", 2: "cudaMemcpyAsync_v3020", 3: "cudaStreamSynchronize_v3020",
               4: "cuModuleGetLoadingMode"}
    conn = sqlite3.connect(path)
    kpid = ", globalPid INT" if pid_in_kernels else ""
    conn.executescript(f"""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT NOT NULL, end INT NOT NULL, deviceId INT,
            contextId INT, streamId INT, correlationId INT{kpid}, demangledName TEXT, shortName TEXT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, end INT, deviceId INT, streamId INT,
            correlationId INT, globalPid INT, bytes INT, copyKind INT, srcKind INT, dstKind INT,
            srcDeviceId INT, dstDeviceId INT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, eventClass INT, globalTid INT,
            correlationId INT, nameId INT);
        CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, text TEXT, globalTid INT, jsonText TEXT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INT, end INT, deviceId INT, streamId INT,
            correlationId INT, globalPid INT, deprecatedSyncType INT, syncType INT);
    """)
    conn.executemany("INSERT INTO StringIds VALUES (?, ?)", strings.items())
    # A launcher (like torchrun) that makes a CUDA API call but runs nothing on a GPU.
    conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (5, 6, 1, ?, 1, 4)", (gtid(LAUNCHER, LAUNCHER),))
    for i, pid in enumerate(pids):
        base = 1_000_000 * (i + 1)
        tid = gtid(pid, pid + 1)
        dev = i
        # Correlation ids collide across processes: process 0's memcpy id is process 1's kernel id.
        k1, k2, mc = (1, 3, 2) if i == 0 else (2, 4, 1)
        krow = [(base + 100, base + 200, dev, 1, 7, k1), (base + 300, base + 400, dev, 1, 7, k2)]
        names = [("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "AllGather"),
                 ("", "my_kernel")]
        for (s, e, d, c, st, corr), (dn, sn) in zip(krow, names, strict=True):
            vals = (s, e, d, c, st, corr) + ((gpid(pid),) if pid_in_kernels else ()) + (dn, sn)
            conn.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * len(vals))})", vals)
        conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                     (base + 250, base + 260, dev, 7, mc, gpid(pid), 4096, 8, 2, 2, dev, 1 - dev))
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?)", [
            (base + 10, base + 20, 1, tid, k1, 1), (base + 30, base + 40, 1, tid, mc, 2),
            (base + 50, base + 60, 1, tid, k2, 1), (base + 500, base + 900, 1, tid, 5, 3)])
        # nsys 2025 layout (syncType 0, deprecatedSyncType set), then 2026 (syncType set).
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES (?,?,?,?,?,?,?,?)", [
            (base + 500, base + 900, dev, 7, 5, gpid(pid), 3, 0),
            (base + 950, base + 960, dev, 0xFFFFFFFF, 6, gpid(pid), None, 4)])
        conn.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?)", [
            (base, base + 1000, 59, "ProfilerStep#1", tid, None),
            (base + 5, None, 59, "never ended", tid, None),
            (base + 6, base + 6, 34, "a mark", tid, None),
        ])
        for rank, nranks in (payload_ranks or {}).get(pid, []):
            js = f'{{"NCCL communicator ID": 77, "No. of ranks": {nranks}, "Rank": {rank}, "CUDA device": {dev}}}'
            conn.execute("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?)",
                         (base + 7, base + 8, 59, "ncclCommInitRank", tid, js))
    if env:
        conn.execute("CREATE TABLE PROCESS_ENV_VARS (globalPid INT, name TEXT, value TEXT)")
        for pid, rank in env.items():
            conn.executemany("INSERT INTO PROCESS_ENV_VARS VALUES (?,?,?)", [
                (gpid(pid), "RANK", str(rank)), (gpid(pid), "WORLD_SIZE", str(len(env))),
                (gpid(pid), "SECRET_TOKEN", "do-not-read")])
    conn.commit()
    conn.close()


def test_older_layout_and_rank_from_process_environment(tmp_path: Path) -> None:
    p = tmp_path / "old.sqlite"
    build_export(p, env={200: 1, 300: 0})  # rank order opposite to pid order
    traces = load_nsys(p)
    assert [(t.rank, t.pid) for t in traces] == [(0, 300), (1, 200)]
    assert all(t.rank_source == "environment RANK" and t.world_size == 2 for t in traces)
    for t in traces:
        assert list(gpu_names(t)) == ["ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                                      "Memcpy PtoP (Device -> Device)", "my_kernel"]
        assert list(t.gpu["coll_name"]) == ["AllGather", "", ""]
        classify_trace(t, load_rules())
        assert list(t.gpu["category"]) == ["comm", "comm", "compute"]
        # Joined inside the process: a cross-process join would give a kernel cudaMemcpyAsync.
        rt = dict(zip(t.runtime["correlation"], runtime_names(t), strict=True))
        assert [rt[c] for c in t.gpu["correlation"]] == ["cudaLaunchKernel", "cudaMemcpyAsync",
                                                         "cudaLaunchKernel"]
        assert "cudaStreamSynchronize" in rt.values()
        assert list(t.names_of(t.host_ops["name_id"].to_numpy())) == ["ProfilerStep#1"]
        assert "SECRET_TOKEN" not in repr(t.meta)
        assert list(t.names_of(t.sync_events["name_id"].to_numpy())) == ["Stream Sync", "Context Sync"]
        assert list(t.sync_events["stream"]) == [7, -1]
        assert any(f"process {LAUNCHER}" in n for n in t.notes)  # the launcher is named, not a rank


def test_api_only_launcher_is_not_a_rank(tmp_path: Path) -> None:
    """Real `nsys profile torchrun` reports hold torchrun's own cuModuleGetLoadingMode call."""
    p = tmp_path / "launcher.sqlite"
    build_export(p)
    traces = load_nsys(p)
    assert [(t.rank, t.pid, t.rank_source, t.world_size) for t in traces] == [
        (0, 200, "process order", 2), (1, 300, "process order", 2)]


def test_rank_from_nccl_payload_uses_the_largest_communicator(tmp_path: Path) -> None:
    p = tmp_path / "payload.sqlite"
    # Each process is rank 0 of a 1-rank sub-communicator and has its world rank in a 2-rank one.
    build_export(p, payload_ranks={200: [(0, 1), (1, 2)], 300: [(0, 2), (0, 1)]})
    traces = load_nsys(p)
    assert [(t.rank, t.pid, t.rank_source, t.world_size) for t in traces] == [
        (0, 300, "NCCL NVTX payload", 2), (1, 200, "NCCL NVTX payload", 2)]


def test_kernels_without_globalpid_go_to_the_only_process(tmp_path: Path) -> None:
    p = tmp_path / "nopid.sqlite"
    build_export(p, pid_in_kernels=False, pids=(200,))
    (t,) = load_nsys(p)
    assert len(t.kernels) == 2 and t.pid == 200
    assert any("globalPid" in n for n in t.notes)
    assert pd.api.types.is_integer_dtype(t.gpu["correlation"])


def test_kernels_without_globalpid_and_several_processes_is_bad_input(tmp_path: Path) -> None:
    p = tmp_path / "nopid2.sqlite"
    build_export(p, pid_in_kernels=False)
    with pytest.raises(BadInputError, match="cannot tell them apart"):
        load_nsys(p)


# ---------------------------------------------------------------------------------------------
# Collective names from kernel names
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "expected"), [
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "AllGather"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)", "SendRecv"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "ReduceScatter"),
    ("ncclDevKernel_AllReduce_Sum_f32_TREE_LL(ncclDevKernelArgsStorage<4096ul>)", "AllReduce"),
    ("ncclDevKernel_Reduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "Reduce"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "AllReduce"),
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "Broadcast"),
    ("void ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "SendRecv"),
    ("ncclAllReduceRingLLKernel_sum_f32(ncclColl)", "AllReduce"),
    ("ncclReduceScatterRingLLKernel_sum_f16(ncclColl)", "ReduceScatter"),
    ("ncclSendRecvKernel_copy_i8(ncclWorkElem)", "SendRecv"),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", ""),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)", ""),
    ("Memcpy PtoP (Device -> Device)", ""),
])
def test_collective_name_from_kernel(name: str, expected: str) -> None:
    assert collective_name_from_kernel(name) == expected


def test_collective_names_vectorized() -> None:
    names = np.array(["ncclDevKernel_SendRecv(x)", "gemm", "ncclDevKernel_SendRecv(x)"], dtype=object)
    assert list(collective_names(names)) == ["SendRecv", "", "SendRecv"]
    assert collective_names(np.zeros(0, dtype=object)).size == 0


# ---------------------------------------------------------------------------------------------
# Gzipped exports (.sqlite.gz), as the bundled public exports are stored
# ---------------------------------------------------------------------------------------------

def test_gzipped_export_loads_like_the_plain_one(private_cache: Path) -> None:
    from analyzers.io.load import load_traces

    from .conftest import NSYS_PACKED

    packed = NSYS_PACKED / "mfu_2gpu_before.sqlite.gz"
    before = hashlib.sha256(packed.read_bytes()).hexdigest()
    plain = load_traces([MFU_BEFORE])
    gz = load_traces([packed])
    assert sorted(gz.ranks) == sorted(plain.ranks) == [0, 1]
    for r in plain.ranks:
        a, b = plain.ranks[r].gpu, gz.ranks[r].gpu
        assert len(a) == len(b) > 0
        assert np.array_equal(a["start_ns"].to_numpy(), b["start_ns"].to_numpy())
        assert np.array_equal(a["end_ns"].to_numpy(), b["end_ns"].to_numpy())
        assert gz.ranks[r].source == str(packed)  # the user's file, never the cache copy
    assert hashlib.sha256(packed.read_bytes()).hexdigest() == before
    assert len(list(private_cache.rglob("*.sqlite"))) == 1  # unpacked once, into the cache
    load_traces([packed])
    assert len(list(private_cache.rglob("*.sqlite"))) == 1  # reused while the input is unchanged


def test_gzipped_file_that_is_neither_json_nor_sqlite_is_one_clear_error(tmp_path: Path,
                                                                          private_cache: Path) -> None:
    import gzip

    from analyzers.io.load import load_traces

    p = tmp_path / "notes.sqlite.gz"
    p.write_bytes(gzip.compress(b"plain text, not a trace\n" * 10))
    with pytest.raises(BadInputError) as err:
        load_traces([p])
    assert str(p) in str(err.value) and "\n" not in str(err.value)


def test_directory_reads_gzipped_export_and_skips_its_report(tmp_path: Path, private_cache: Path) -> None:
    from analyzers.io.discover import expand_paths

    from .conftest import NSYS_PACKED

    shutil.copy(NSYS_PACKED / "nvfuser_report1.sqlite.gz", tmp_path / "nvfuser_report1.sqlite.gz")
    shutil.copy(NVFUSER_REP, tmp_path / "nvfuser_report1.nsys-rep")
    assert [p.name for p in expand_paths([tmp_path])] == ["nvfuser_report1.sqlite.gz"]


def test_a_time_that_is_not_integer_ns_is_refused_by_name(tmp_path: Path) -> None:
    """A REAL of 2**63 in a kernel's start (found by the field fuzz) would wrap in the int64 table
    with a numpy warning on stderr; it is refused in one line instead."""
    path = tmp_path / "real start.sqlite"
    shutil.copyfile(NVFUSER_SQLITE, path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = ? WHERE rowid IN "
                     "(SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1)", (9.223372036854776e18,))
    conn.close()
    with pytest.raises(BadInputError) as info:
        load_nsys(path)
    assert str(info.value) == (f"{path}: an activity's start time is not integer nanoseconds "
                               "(9.223372036854776e+18): not what nsys writes")

