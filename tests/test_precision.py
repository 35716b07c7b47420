"""Findings precision at the trace's edges and syncs that did not block.

A detector must not count evidence it cannot see: idle "caused" by a sync after which nothing is
launched (the trace just ends), idle after a sync that found the GPU already drained, the
profiler's own closing sync, work that ended just outside the analysed steps, or a wait on work
from before the trace began. Each case writes a small Kineto trace reproducing the shape, with
a look-alike that must still fire; all go through the CLI. Times in µs; figures worked out by
hand in the comments.
"""

from __future__ import annotations

import json
from pathlib import Path

from .inprocess import cli
from .trace_files import GEMM, NCCL_ALLREDUCE, Kineto

ROOT = Path(__file__).resolve().parents[1]
COPY = "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 1, 128, 1>"


def analyze_json(*args: str | Path) -> dict:
    r = cli("analyze", *args, "-f", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def finding(doc: dict, fid: str) -> dict | None:
    found = [f for f in doc["findings"] if f["id"] == fid]
    return found[0] if found else None


def idle_of(doc: dict) -> list[int]:
    return [r["gpu_idle_ns"] for r in doc["syncs"]["rows"] if r["rank"] == 0]  # every sync: a few are listed


# --- torch.cuda.synchronize() after the last iteration, no ProfilerStep -----------------

def final_sync(path: Path, *, sync_after: int) -> Path:
    """Three iterations, no step markers, all launched up front (host far ahead): iteration i has a
    GEMM [1000i, 1000i + 600] and an all-reduce [1000i + 300, 1000i + 800] (comm in flight much of
    the time). The host calls cudaDeviceSynchronize after launching `sync_after` iterations, while
    the GPU still has queued work; it returns when the GPU drains; the host launches the remaining
    iterations 50 µs after it returns; then CPU-only work until 6000 µs (the trace's end)."""
    k = Kineto()
    host = 10
    drained = None
    for i in (1, 2, 3):
        g = 1000 * i
        if i > sync_after and drained is None:
            drained = 1000 * (i - 1) + 800
            k.call("cudaDeviceSynchronize", host, drained + 2)
            host = drained + 50
            g = max(g, host + 10)
        k.kernel(g, g + 600, GEMM, launch=host)
        k.kernel(g + 300, g + 800, NCCL_ALLREDUCE, launch=host + 1, stream=20)
        host += 5
    if drained is None:
        k.call("cudaDeviceSynchronize", host, 3802)
    k.op("aten::empty", 3900, 6000)
    return k.write(path)


def test_sync_after_the_last_iteration_is_silent(tmp_path: Path) -> None:
    doc = analyze_json(final_sync(tmp_path / "final.json", sync_after=3))
    # the sync found queued work (the GPU runs until 3800) but nothing is launched after it: it caused
    # no idle (it used to be charged 3802 -> 6000 = 2198 µs, "inside the overlapped region")
    assert idle_of(doc) == [0] and doc["syncs"]["rows"][0]["next_gpu_start_ns"] is None
    assert finding(doc, "host-blocking-sync") is None


def test_sync_between_iterations_still_fires(tmp_path: Path) -> None:
    doc = analyze_json(final_sync(tmp_path / "mid.json", sync_after=1))
    # sync while iteration 1's all-reduce is in flight; the GPU drains at 1800, the call returns at
    # 1802, the next launch at 1852 starts at 2000 (its own slot): idle from 1802 to 2000 = 198 µs
    assert idle_of(doc) == [198_000]
    f = finding(doc, "host-blocking-sync")
    assert f is not None and f["evidence"]["gpu_idle_ns_total"] == 198_000


# --- a sync on a drained GPU claims nothing; the profiler's closing sync never ------

def drained_sync(path: Path, *, sync_at: int) -> Path:
    """Steps 1-3 at host [1000n, 1000n + 900) µs, GPU g = 1000n + 100. Each step: GEMM [g, g+200] and
    an all-reduce [g+50, g+150] launched at h+10/h+11; the host calls cudaStreamSynchronize at
    h+sync_at, returning at max(h+sync_at+3, g+202); then launches a GEMM at h+600 ([h+610, h+700])
    and an all-reduce at h+605 ([h+620, h+680]). sync_at=400: the GPU drained at h+300, before
    the call; sync_at=150: the GEMM still runs."""
    k = Kineto()
    for n in (1, 2, 3):
        h, g = 1000 * n, 1000 * n + 100
        k.step(n, h, h + 900)
        k.kernel(g, g + 200, GEMM, launch=h + 10)
        k.kernel(g + 50, g + 150, NCCL_ALLREDUCE, launch=h + 11, stream=20)
        k.call("cudaStreamSynchronize", h + sync_at, max(h + sync_at + 3, g + 202))
        k.kernel(h + 610, h + 700, GEMM, launch=h + 600)
        k.kernel(h + 620, h + 680, NCCL_ALLREDUCE, launch=h + 605, stream=20)
    return k.write(path)


def test_sync_on_a_drained_gpu_is_a_launch_gap(tmp_path: Path) -> None:
    doc = analyze_json(drained_sync(tmp_path / "drained.json", sync_at=400))
    # each sync returned in 3 µs on an idle GPU: it blocked nothing (was charged h+403 -> h+610 = 207 µs)
    assert idle_of(doc) == [0, 0, 0]
    assert finding(doc, "host-blocking-sync") is None
    gaps = finding(doc, "launch-bound-gaps")
    # the gaps go back to launch-bound-gaps: [h+300, h+610) = 310 µs in each step, and between steps
    # [h+700, h+1100) = 400 µs twice (the next step's GEMM launched at h+1010)
    assert gaps is not None and gaps["evidence"]["n_gaps"] == 5
    assert gaps["evidence"]["gap_ns_total"] == 3 * 310_000 + 2 * 400_000


def test_sync_on_a_busy_gpu_still_fires(tmp_path: Path) -> None:
    doc = analyze_json(drained_sync(tmp_path / "busy.json", sync_at=150))
    # called while the GEMM runs (until h+300), returns h+302, next GEMM starts h+610: 308 µs each
    assert idle_of(doc) == [308_000] * 3
    f = finding(doc, "host-blocking-sync")
    assert f is not None and f["evidence"]["n_syncs"] == 3
    # the gaps after the syncs are theirs: only the 2 between steps stay, fewer than the 3 needed
    assert finding(doc, "launch-bound-gaps") is None


def closing_sync(path: Path, *, inside_last_step: bool) -> Path:
    """Steps 1-2 at host [1000n, 1000n + 900) µs, g = 1000n + 100: a GEMM (step 1 [g, g+600], step 2
    [g, 2960]) and an all-reduce [g+100, g+300]. The profiler's cudaDeviceSynchronize at 2950, after
    step 2 ended (2900) — with inside_last_step at 2850, inside it — finds the GEMM still running and
    returns at 2962. The next (unprofiled) iteration's kernel is launched at 13962 and starts at
    14000: 11.038 ms of GPU idle after the sync."""
    k = Kineto()
    for n in (1, 2):
        h, g = 1000 * n, 1000 * n + 100
        k.step(n, h, h + 900)
        end = 2960 if n == 2 else g + 600
        k.kernel(g, end, GEMM, launch=h + 10)
        k.kernel(g + 100, g + 300, NCCL_ALLREDUCE, launch=h + 11, stream=20)
    k.call("cudaDeviceSynchronize", 2850 if inside_last_step else 2950, 2962)
    k.kernel(14_000, 14_100, GEMM, launch=13_962)
    return k.write(path)


def test_profilers_closing_sync_is_never_charged(tmp_path: Path) -> None:
    doc = analyze_json(closing_sync(tmp_path / "closing.json", inside_last_step=False))
    assert idle_of(doc) == [0]  # was 2962 -> 14000: 11.038 ms


def test_same_sync_inside_the_last_step_is_charged(tmp_path: Path) -> None:
    doc = analyze_json(closing_sync(tmp_path / "inside.json", inside_last_step=True))
    assert idle_of(doc) == [14_000_000 - 2_962_000]


# --- detector review: evidence just outside the analysed steps, and before the trace began ------

def starved_shape(path: Path, *, dependency: bool) -> Path:
    """Host steps 1 [0, 500), 2 [500, 1500), 3 [1500, 2000). Step 1 launches a long GEMM D [400, 1500]
    on stream 8 and a tiny broadcast E [300, 310] on the comm stream (with `dependency`, also a GEMM
    A [0, 1000] on stream 7). Step 2 launches the all-reduce C at 510; it starts at 1002. C is step
    2's first GPU work, so step 2's window starts at 1002 and A (ended 1000) lies outside it. With A,
    C waited for A (it started 2 µs after A ended). Without A, C waited from 510 to 1002 = 492 µs
    while D held the SMs: comm-starved-by-compute."""
    k = Kineto()
    k.step(1, 0, 500)
    k.step(2, 500, 1500)
    k.step(3, 1500, 2000)
    if dependency:
        k.kernel(0, 1000, GEMM, launch=5)
    k.kernel(300, 310, "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*)", launch=6, stream=20)
    k.kernel(400, 1500, GEMM, launch=100, stream=8)
    k.kernel(1002, 1102, NCCL_ALLREDUCE, launch=510, stream=20)
    k.kernel(1600, 1700, GEMM, launch=1510)
    return k.write(path)


def test_starved_ignores_a_dependency_just_before_the_selected_step(tmp_path: Path) -> None:
    p = starved_shape(tmp_path / "dep.json", dependency=True)
    # C waited for A (ended 1000, in step 1): with --steps 2, A lies outside the window but is still
    # what C waited on -> silent (not 492 µs "starved")
    assert finding(analyze_json(p, "--steps", "2"), "comm-starved-by-compute") is None
    assert finding(analyze_json(p), "comm-starved-by-compute") is None


def test_starved_still_fires_without_the_dependency(tmp_path: Path) -> None:
    p = starved_shape(tmp_path / "starved.json", dependency=False)
    for doc in (analyze_json(p, "--steps", "2"), analyze_json(p)):
        f = finding(doc, "comm-starved-by-compute")
        assert f is not None and f["evidence"]["delay_ns_total"] == 492_000


def test_starved_ignores_a_wait_on_work_from_before_the_trace(tmp_path: Path) -> None:
    """The same wait with nothing recorded ending before C (no E, no A): what C waited on may
    predate the trace, so it is not evidence of starvation."""
    k = Kineto()
    k.kernel(400, 1500, GEMM, launch=100, stream=8)
    k.kernel(1002, 1102, NCCL_ALLREDUCE, launch=510, stream=20)
    assert finding(analyze_json(k.write(tmp_path / "first.json")), "comm-starved-by-compute") is None


def copies_in_step_two(path: Path) -> Path:
    """Steps 1-3 at host [1000n, 1000n + 900), g = 1000n + 100. Steps 1 and 3: GEMM [g, g+300] with
    an all-reduce [g+50, g+150] under it. Step 2: a CatArrayBatchedCopy [g, g+40] then an
    all-reduce [g+40, g+140] on the comm stream, nothing under them (copy 40 of a 140 µs exposed
    window: 29 %), then a GEMM [g+150, g+300]."""
    k = Kineto()
    for n in (1, 2, 3):
        h, g = 1000 * n, 1000 * n + 100
        k.step(n, h, h + 900)
        if n == 2:
            k.kernel(g, g + 40, COPY, launch=h + 5, stream=20)
            k.kernel(g + 40, g + 140, NCCL_ALLREDUCE, launch=h + 6, stream=20)
            k.kernel(g + 150, g + 300, GEMM, launch=h + 7)
        else:
            k.kernel(g, g + 300, GEMM, launch=h + 5)
            k.kernel(g + 50, g + 150, NCCL_ALLREDUCE, launch=h + 6, stream=20)
    return k.write(path)


def test_copy_kernels_of_an_unselected_step_between_selected_ones_are_silent(tmp_path: Path) -> None:
    p = copies_in_step_two(tmp_path / "copies.json")
    # --steps 1,3 used to analyse the whole range from step 1 to step 3, step 2 included
    assert finding(analyze_json(p, "--steps", "1,3"), "copy-kernels-block-overlap") is None
    for picked in ("2", "1-3"):
        f = finding(analyze_json(p, "--steps", picked), "copy-kernels-block-overlap")
        assert f is not None and f["evidence"]["exposed_copy_ns"] == 40_000


def slowed_in_step_two(path: Path) -> Path:
    """Steps 1-3 at host [1000n, 1000n + 900), g = 1000n + 100; three all-reduces of 1 Mi elements
    per step at g, g+200, g+400. Steps 1 and 3: 100 µs each, nothing beside them. Step 2: 150 µs
    each, under a GEMM [g, g+600]: 50 % slower overlapped."""
    k = Kineto()
    size = {"In msg nelems": 1 << 20}
    for n in (1, 2, 3):
        h, g = 1000 * n, 1000 * n + 100
        k.step(n, h, h + 900)
        if n == 2:
            k.kernel(g, g + 600, GEMM, launch=h + 5)
        for i in range(3):
            s0 = g + 200 * i
            k.kernel(s0, s0 + (150 if n == 2 else 100), NCCL_ALLREDUCE, launch=h + 6 + i, stream=20, **size)
    return k.write(path)


def test_comm_slowed_of_an_unselected_step_between_selected_ones_is_silent(tmp_path: Path) -> None:
    p = slowed_in_step_two(tmp_path / "slowed.json")
    # --steps 1,3: six samples alone, none overlapped (step 2's three used to be compared too)
    assert finding(analyze_json(p, "--steps", "1,3"), "comm-slowed-by-overlap") is None
    f = finding(analyze_json(p, "--steps", "1-3"), "comm-slowed-by-overlap")
    assert f is not None and f["ranks"] == [0]
    c = f["evidence"]["collectives"][0]
    assert (c["n_alone"], c["n_overlapped"], c["median_alone_ns"], c["median_overlapped_ns"]) == (6, 3, 100_000,
                                                                                                  150_000)
