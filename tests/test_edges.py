"""Correctness at the edges: doubled nsys runtime rows, step selection that scopes every
section, gates that measured nothing, HTA's GPU-side ProfilerStep cut, other devices' runtimes.

Every case writes its own small trace file reproducing the shape seen on a real public trace,
with a look-alike that must keep today's behaviour, and goes through the public entry points
(load_traces, the CLI) so that module moves do not break it. Expected figures are worked out by
hand in the comments (Kineto times in µs, nsys times in ns).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from analyzers.io.load import load_traces

from .conftest import HTA_MISSING
from .inprocess import cli
from .trace_files import GEMM, NCCL_ALLREDUCE, Kineto, Nsys

ROOT = Path(__file__).resolve().parents[1]


def analyze_json(*args: str | Path) -> dict:
    r = cli("analyze", *args, "-f", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def syncs_of(doc: dict, rank: int = 0) -> list[dict]:
    return [r for r in doc["syncs"]["rows"] if r["rank"] == rank]  # every sync: these sets have a few


# --- nsys exports that record every runtime call twice ------------------------------------

def doubled_export(path: Path, *, doubled: bool) -> Path:
    """K1 [1.0, 3.0] ms launched at 0.1 ms; a synchronous cudaMemcpy [0.2, 3.1] ms whose DtoH copy
    runs [3.0, 3.05] ms; K2 [3.16, 3.28] launched at 3.15; cudaDeviceSynchronize [3.2, 3.29];
    K3 [3.41, 3.5] launched at 3.4. With `doubled`, each sync also appears as its `_v3020` twin,
    same thread and correlation id, nested 10 µs / 1 µs inside (the nsys 2022.2 MPI+CUDA shape)."""
    n = Nsys()
    n.kernel(1_000_000, 3_000_000, launch=100_000)
    c = n.call("cudaMemcpy", 200_000, 3_100_000)
    n.memcpy(3_000_000, 3_050_000, corr=c)
    n.kernel(3_160_000, 3_280_000, launch=3_150_000)
    d = n.call("cudaDeviceSynchronize", 3_200_000, 3_290_000)
    n.kernel(3_410_000, 3_500_000, launch=3_400_000)
    if doubled:
        n.call("cudaMemcpy_v3020", 210_000, 3_090_000, corr=c)
        n.call("cudaDeviceSynchronize_v3020", 3_201_000, 3_289_000, corr=d)
    return n.write(path)


def test_nsys_doubled_runtime_rows_are_counted_once(tmp_path: Path) -> None:
    plain = analyze_json(doubled_export(tmp_path / "plain.sqlite", doubled=False))
    doubled = analyze_json(doubled_export(tmp_path / "doubled.sqlite", doubled=True))
    # memcpy: the GPU drains at 3.1 ms (its copy ended 3.05), next launch starts 3.16 -> 60 µs;
    # device sync: drained at 3.29, K3 starts 3.41 -> 120 µs. The twins add nothing.
    for doc in (plain, doubled):
        rows = syncs_of(doc)
        assert [(r["api"], r["gpu_idle_ns"]) for r in rows] == [("cudaMemcpy", 60_000),
                                                                ("cudaDeviceSynchronize", 120_000)]
        assert doc["syncs"]["host_blocked_ns"] == 2_900_000 + 90_000
    notes = doubled["ranks"][0]["notes"]
    assert any("2 CUDA API calls were recorded twice" in n for n in notes)
    assert not any("recorded twice" in n for n in plain["ranks"][0]["notes"])
    idle = sum(r["gpu_idle_ns"] for r in syncs_of(doubled))
    assert idle <= doubled["ranks"][0]["span_ns"]


def test_nsys_repeated_calls_that_are_not_twins_are_kept(tmp_path: Path) -> None:
    """Look-alikes: two back-to-back syncs (own correlation ids), a call nested in another with a
    different correlation id, and one correlation id on two threads all stay."""
    n = Nsys()
    n.kernel(1_000_000, 2_000_000, launch=100_000)
    n.call("cudaDeviceSynchronize", 200_000, 2_000_100)
    n.call("cudaDeviceSynchronize", 2_000_200, 2_000_300)
    n.call("cudaStreamSynchronize", 2_100_000, 2_200_000)
    n.call("cudaEventQuery", 2_110_000, 2_120_000)  # nested, own correlation id
    c = n.call("cudaEventRecord", 2_300_000, 2_300_500)
    n.call("cudaEventRecord", 2_300_100, 2_300_200, corr=c, tid=999)  # same id, another thread
    t = load_traces([n.write(tmp_path / "kept.sqlite")]).ranks[0]
    assert len(t.runtime) == 7  # 1 launch + 6 calls
    assert not any("recorded twice" in note for note in t.notes)


def test_sync_idle_beyond_the_span_is_flagged(tmp_path: Path) -> None:
    """The sanity check: a Kineto trace (no de-duplication there) with the same sync recorded
    twice, nested: K1 [0, 100] µs, syncs [10, 100] and [11, 99], K2 launched at 900 runs [1000, 1010].
    Each sync is charged the 900 µs gap: 1800 µs of GPU idle in a 1010 µs trace."""
    k = Kineto()
    k.kernel(0, 100, launch=0)
    c = k.call("cudaDeviceSynchronize", 10, 100)
    k.call("cudaDeviceSynchronize", 11, 99, corr=c)
    k.kernel(1000, 1010, launch=900)
    doc = analyze_json(k.write(tmp_path / "twice.json"))
    assert sum(r["gpu_idle_ns"] for r in syncs_of(doc)) == 1_800_000
    assert any("GPU idle on device 0 adds up to 1.800 ms, more than the trace's span (1.010 ms)" in n
               for n in doc["notes"])
    # look-alike: the sync once -> 900 µs, no note
    k.events = [e for e in k.events if e["ts"] != 11]
    doc = analyze_json(k.write(tmp_path / "once.json"))
    assert [r["gpu_idle_ns"] for r in syncs_of(doc)] == [900_000]
    assert not any("more than the trace's span" in n for n in doc["notes"])


# --- --steps refuses unknown steps and scopes every section -----------------------------

def two_rank_steps(tmp_path: Path) -> list[Path]:
    """Two ranks, steps 1-3 (host [1000n, 1000n + 900) µs, GPU 100 µs behind: g = 1000n + 100).

    Each step: a GEMM [g, g+300] and an all-reduce [g+50, g+150] on both ranks. Step 2 only: rank 1
    reaches the all-reduce 400 µs late ([g+450, g+550]; rank 0 waits [g+50, g+550]), and rank 0's host
    calls cudaStreamSynchronize at h+20 while it is in flight, returning at g+552; its next kernel,
    launched at g+600, starts at g+610: 58 µs of GPU idle caused by the sync.
    """
    paths = []
    for r in (0, 1):
        k = Kineto(rank=r, world_size=2)
        for n in (1, 2, 3):
            h, g = 1000 * n, 1000 * n + 100
            k.step(n, h, h + 900)
            k.kernel(g, g + 300, GEMM, launch=h + 5)
            late = n == 2 and r == 1
            k.kernel(g + (450 if late else 50), g + (550 if n == 2 else 150), NCCL_ALLREDUCE, launch=h + 10,
                     stream=20)
            if n == 2:
                if r == 0:
                    k.call("cudaStreamSynchronize", h + 20, g + 552)
                k.kernel(g + 610, g + 650, GEMM, launch=g + 600)
        paths.append(k.write(tmp_path / f"rank{r}.json"))
    return paths


def test_unknown_step_is_refused_listing_the_steps_present(tmp_path: Path) -> None:
    paths = two_rank_steps(tmp_path)
    r = cli("analyze", *paths, "--steps", "2,9")
    assert r.returncode == 2 and r.stdout == ""
    assert "step 9 not in rank 0" in r.stderr and "steps present: 1-3" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    # a trace without step ranges refuses any selection
    k = Kineto()
    k.kernel(0, 10, launch=0)
    r = cli("analyze", k.write(tmp_path / "nosteps.json"), "--steps", "1")
    assert r.returncode == 2 and "has no step ranges" in r.stderr
    # look-alike: steps that are there
    assert cli("analyze", *paths, "--steps", "1-3").returncode == 0


def test_findings_syncs_and_cross_rank_honour_the_selected_steps(tmp_path: Path) -> None:
    paths = two_rank_steps(tmp_path)
    whole = analyze_json(*paths)
    assert {"host-blocking-sync", "late-peer"} <= {f["id"] for f in whole["findings"]}
    assert whole["syncs"]["n"] == 1 and whole["cross_rank"]["late_ranks"][0]["rank"] == 1

    picked = analyze_json(*paths, "--steps", "1,3")
    assert not {"host-blocking-sync", "late-peer"} & {f["id"] for f in picked["findings"]}
    assert picked["syncs"]["n"] == 0 and picked["syncs"]["per_rank"]["0"]["n"] == 0
    cr = picked["cross_rank"]
    assert cr["n_matched"] == 2 and cr["late_ranks"] == []  # the step-1 and step-3 all-reduces only

    step2 = analyze_json(*paths, "--steps", "2")
    assert {"host-blocking-sync", "late-peer"} <= {f["id"] for f in step2["findings"]}
    assert step2["syncs"]["n"] == 1 and syncs_of(step2)[0]["gpu_idle_ns"] == 58_000
    assert step2["cross_rank"]["n_matched"] == 1

    # the gate: a finding in an excluded step does not fail the run
    assert cli("analyze", *paths, "--steps", "1,3", "--fail-on", "host-blocking-sync", "-f", "csv").returncode == 0
    assert cli("analyze", *paths, "--fail-on", "host-blocking-sync", "-f", "csv").returncode == 1


def test_whole_window_of_steps_apart_leaves_out_the_steps_between(tmp_path: Path) -> None:
    """Steps 1-3 at host [1000n, 1000n + 900) µs, g = 1000n + 100. Steps 1 and 3: GEMM [g, g+300] with
    an all-reduce [g+50, g+150] under it; step 2: the all-reduce [g, g+100] alone, then the GEMM
    [g+150, g+300]."""
    k = Kineto()
    for n in (1, 2, 3):
        h, g = 1000 * n, 1000 * n + 100
        k.step(n, h, h + 900)
        k.kernel(g + (150 if n == 2 else 0), g + 300, GEMM, launch=h + 5)
        k.kernel(g + (0 if n == 2 else 50), g + (100 if n == 2 else 150), NCCL_ALLREDUCE, launch=h + 6, stream=20)
    p = k.write(tmp_path / "apart.json")
    apart = analyze_json(p, "--steps", "1,3", "--no-diagnose")["ranks"][0]
    # steps 1 and 3 only: 200 µs of comm, all hidden; span 300 + 300 (step 2 was counted before: 66.7 %)
    assert (apart["comm_ns"], apart["overlap_ns"], apart["n_comm"]) == (200_000, 200_000, 2)
    assert apart["overlap_ratio"] == 1.0 and (apart["span_ns"], apart["idle_ns"]) == (600_000, 0)
    assert sum(s["n"] for s in apart["streams"]) == 4
    # look-alike: adjacent steps keep the one window they always had
    every = analyze_json(p, "--steps", "1-3", "--no-diagnose")["ranks"][0]
    whole = analyze_json(p, "--no-diagnose")["ranks"][0]
    assert every["overlap_ratio"] == whole["overlap_ratio"] == 2 / 3
    assert (every["comm_ns"], every["span_ns"]) == (whole["comm_ns"], whole["span_ns"]) == (300_000, 2_300_000)


# --- a gate that measured nothing fails loudly; common custom comm kernels are known -------

DEEPEP = "void deep_ep::intranode::dispatch<8, 768, 6144>(int4*, float*, int*, long*, float*, int*)"
CUSTOM = "void my_moe::ep_all_to_all_kernel<128>(float*, int)"


def custom_comm(tmp_path: Path, comm_name: str, name: str = "custom.json") -> Path:
    """A GEMM [0, 100] µs and a comm kernel [50, 150] µs on another stream: 50 % hidden when the
    comm kernel is recognised."""
    k = Kineto()
    k.kernel(0, 100, GEMM, launch=0)
    k.kernel(50, 150, comm_name, launch=1, stream=20)
    return k.write(tmp_path / name)


def test_undefined_ratio_fails_the_gate_and_names_the_rule(tmp_path: Path) -> None:
    p = custom_comm(tmp_path, CUSTOM)
    r = cli("analyze", p, "--fail-under-overlap", "0.4", "-f", "csv")
    assert r.returncode == 1
    assert "overlap ratio undefined for rank 0" in r.stderr
    assert "--comm-kernel 'my_moe::ep_all_to_all_kernel'" in r.stderr
    allowed = cli("analyze", p, "--fail-under-overlap", "0.4", "--allow-undefined", "-f", "csv")
    assert allowed.returncode == 0 and "overlap ratio undefined for rank 0" in allowed.stderr
    # the note names the rule, in every output
    doc = analyze_json(p)
    assert doc["ranks"][0]["overlap_ratio"] is None
    assert any("'my_moe::ep_all_to_all_kernel' look like it" in n for n in doc["ranks"][0]["notes"])
    # following the note: the ratio is defined (50 %) and the gate decides on it
    ok = cli("analyze", p, "--comm-kernel", "my_moe::ep_all_to_all_kernel", "--fail-under-overlap", "0.4",
             "-f", "csv")
    assert ok.returncode == 0 and "undefined" not in ok.stderr


def test_deepep_kernels_are_communication_by_default(tmp_path: Path) -> None:
    doc = analyze_json(custom_comm(tmp_path, DEEPEP))
    assert doc["ranks"][0]["overlap_ratio"] == 0.5 and doc["ranks"][0]["n_comm"] == 1
    assert not any("look like" in n for n in doc["ranks"][0]["notes"])
    # DeepEP's layout kernel only counts tokens locally: compute, and not a look-alike either
    layout = analyze_json(custom_comm(tmp_path, "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long*)",
                                      "layout.json"))
    assert layout["ranks"][0]["overlap_ratio"] is None and layout["ranks"][0]["n_compute"] == 2


def test_gate_with_nothing_selected_fails_and_recognised_comm_passes_silently(tmp_path: Path) -> None:
    """Step 1 has only a GEMM; step 2 a GEMM with an all-reduce half under it."""
    k = Kineto()
    k.step(1, 0, 900)
    k.kernel(100, 300, GEMM, launch=5)
    k.step(2, 1000, 1900)
    k.kernel(1100, 1300, GEMM, launch=1005)
    k.kernel(1200, 1400, NCCL_ALLREDUCE, launch=1010, stream=20)
    p = k.write(tmp_path / "steps.json")
    r = cli("analyze", p, "--steps", "1", "--fail-under-overlap", "0.4", "-f", "csv")
    assert r.returncode == 1 and "overlap ratio undefined for rank 0" in r.stderr
    passed = cli("analyze", p, "--steps", "2", "--fail-under-overlap", "0.4", "-f", "csv")
    assert passed.returncode == 0 and passed.stderr.strip() == ""


# --- --like-hta and a GPU-side ProfilerStep that starts after the last host step ----------

def hta_cut_trace(path: Path, *, gpu_annotations: bool) -> Path:
    """Steps 1-3 at host [1000n, 1000n + 900) µs, GPU 400 µs behind (g = 1000n + 400). Steps 1-2:
    GEMM [g, g+200], all-reduce [g+100, g+300] (half hidden). Step 3: GEMM [g, g+200] and an
    all-reduce [g+50, g+150] fully under it, launched at h+10 / h+20, before step 3's GPU-side
    annotation starts (g). Every step also: GEMM [g+300, g+400] and all-reduce [g+350, g+500]
    launched at h+500 / h+510. With the GPU-side annotations HTA 0.5.0 cuts at g = 3400:
    hidden 100 + 50 + 100 + 50 + 100 = 400 of comm 200 + 150 + 200 + 150 + 100 = 800 -> 50.00 %;
    without them at the host step 3000: 300 / 700 = 42.86 %."""
    k = Kineto(rank=0, world_size=1)
    for n in (1, 2, 3):
        h, g = 1000 * n, 1000 * n + 400
        k.step(n, h, h + 900)
        k.kernel(g, g + 200, GEMM, launch=h + 10)
        if n == 3:
            k.kernel(g + 50, g + 150, NCCL_ALLREDUCE, launch=h + 20, stream=20)
        else:
            k.kernel(g + 100, g + 300, NCCL_ALLREDUCE, launch=h + 20, stream=20)
        k.kernel(g + 300, g + 400, GEMM, launch=h + 500)
        k.kernel(g + 350, g + 500, NCCL_ALLREDUCE, launch=h + 510, stream=20)
        if gpu_annotations:
            k.gpu_annotation(f"ProfilerStep#{n}", g, g + 550)
    return k.write(path)


CUT_CASES = [(True, 0.5), (False, 3 / 7)]  # (GPU-side ProfilerStep annotations, expected overlap ratio)


@pytest.mark.parametrize("gpu_annotations,expected", CUT_CASES)
def test_like_hta_cuts_where_hta_does(tmp_path: Path, gpu_annotations: bool, expected: float) -> None:
    d = tmp_path / "run"
    d.mkdir()
    p = hta_cut_trace(d / "rank-0.json", gpu_annotations=gpu_annotations)
    doc = analyze_json(p, "--like-hta")
    assert doc["ranks"][0]["overlap_ratio"] == pytest.approx(expected, abs=1e-9)


@pytest.mark.hta
@pytest.mark.filterwarnings("ignore:The inplace keyword")  # HTA 0.5.0's own pandas calls
@pytest.mark.parametrize("gpu_annotations,expected", CUT_CASES)
def test_hta_itself_cuts_there(tmp_path: Path, gpu_annotations: bool, expected: float) -> None:
    """HolisticTraceAnalysis 0.5.0 on the same file gives the figure --like-hta reproduces."""
    trace_analysis = pytest.importorskip("hta.trace_analysis", reason=HTA_MISSING)
    d = tmp_path / "run"
    d.mkdir()
    hta_cut_trace(d / "rank-0.json", gpu_annotations=gpu_annotations)
    logging.disable(logging.WARNING)
    try:
        hta = trace_analysis.TraceAnalysis(trace_dir=str(d)).get_comm_comp_overlap(visualize=False)
    finally:
        logging.disable(logging.NOTSET)
    assert float(hta["comp_comm_overlap_pctg"].iloc[0]) == pytest.approx(round(100 * expected, 2))


# --- another device's runtime: syncs cannot be judged --------------------------------------

def scalar_reads(path: Path, runtime_cat: str) -> Path:
    """A kernel [0, 100] µs, then two aten::item -> aten::_local_scalar_dense reads on the host, and
    (CUDA flavour) a cudaStreamSynchronize inside the first, while the kernel runs."""
    k = Kineto(runtime_cat=runtime_cat)
    k.kernel(0, 100, GEMM, launch=0)
    for start in (10, 200):
        k.op("aten::item", start, start + 95)
        k.op("aten::_local_scalar_dense", start + 1, start + 94)
    if runtime_cat == "cuda_runtime":
        k.call("cudaStreamSynchronize", 12, 100)
    else:
        k.call("mtiaStreamSynchronize", 12, 100)
    k.kernel(300, 310, GEMM, launch=296)
    return k.write(path)


def test_mtia_runtime_syncs_are_not_judged(tmp_path: Path) -> None:
    doc = analyze_json(scalar_reads(tmp_path / "mtia.json", "mtia_runtime"))
    assert doc["syncs"]["n"] == 0  # not every aten::_local_scalar_dense as a blocking sync
    assert any("rank 0: runtime calls are mtia_runtime: blocking host syncs cannot be judged" in n
               for n in doc["notes"])
    # the MTIA runtime's launches are read: kernels know their launch
    t = load_traces([tmp_path / "mtia.json"]).ranks[0]
    assert len(t.runtime) == 3


def test_cuda_runtime_syncs_still_judged(tmp_path: Path) -> None:
    doc = analyze_json(scalar_reads(tmp_path / "cuda.json", "cuda_runtime"))
    rows = syncs_of(doc)
    assert [(r["api"], r["sync_op"]) for r in rows] == [("cudaStreamSynchronize", "aten::_local_scalar_dense")]
    assert not any("cannot be judged" in n for n in doc["notes"])


def test_hip_syncs_are_recognised(tmp_path: Path) -> None:
    """ROCm traces name HIP calls in the cuda_runtime category: hipDeviceSynchronize is a sync."""
    k = Kineto()
    k.kernel(0, 100, GEMM, launch=0)
    k.call("hipDeviceSynchronize", 10, 101)
    k.kernel(150, 160, GEMM, launch=140)
    doc = analyze_json(k.write(tmp_path / "hip.json"))
    assert [(r["api"], r["gpu_idle_ns"]) for r in syncs_of(doc)] == [("hipDeviceSynchronize", 49_000)]
