"""The 4-rank sample sets (sample_traces/four-gpus/, 4 × H200): the cross-rank analysis against figures
worked out here straight from the Kineto JSON, with no analyzer code: which kernels match across ranks
(the i-th collective kernel of each rank), who arrives last and by how much (clock: one host, so no
offset), the stragglers' counts, and each profiled step's length on its slowest rank (where the critical
path ends). One host's ranks share the GPU clock, so every figure must agree to the nanosecond (±1 ns of
rounding: Kineto writes microseconds with three decimals)."""

from __future__ import annotations

import gzip
import json
import statistics
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

from analyzers.io.load import load_traces
from analyzers.report import analyze

from .conftest import SAMPLES

FOUR = SAMPLES / "four-gpus"
SETS = ["ag-gemm", "gemm-rs", "symm-mem", "fsdp", "thunder-fsdp"]
NCCL_SETS = ["fsdp", "thunder-fsdp"]  # NCCL collectives; the others move data by copy engine, between barriers
BARRIER = "c10d::symmetric_memory::barrier_kernel"
TOGETHER_NS = 2_000  # starts closer than 2 µs count as arriving together: no late rank (-1), as the analysis says
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


@cache
def events(name: str, rank: int) -> list[dict]:
    with gzip.open(FOUR / name / f"rank{rank}.json.gz", "rt") as f:
        return json.load(f)["traceEvents"]


@cache
def report(name: str) -> dict:
    return analyze(load_traces([FOUR / name])).to_dict()


def kernels(name: str, rank: int, match: str, by_stream: bool) -> dict[int, list[tuple[int, int]]]:
    """(start, end) in ns of the rank's kernels whose name contains `match`, by start: all in one list
    (NCCL: one process group), or one list per CUDA stream (barriers: each stream's i-th meets its peers')."""
    out: dict[int, list[tuple[int, int]]] = {}
    for e in events(name, rank):
        if e.get("cat") == "kernel" and match in e["name"]:
            key = e["args"]["stream"] if by_stream else 0
            start = round(e["ts"] * 1000)  # Kineto: microseconds with three decimals, so whole nanoseconds
            out.setdefault(key, []).append((start, start + round(e["dur"] * 1000)))
    return {k: sorted(v) for k, v in out.items()}


def by_hand(name: str, match: str, by_stream: bool = False) -> list[dict]:
    """Per collective (the i-th matching kernel of every rank): the last rank to start, its lead, the ends'
    spread; in order of their first start."""
    per_rank = [kernels(name, r, match, by_stream) for r in range(4)]
    out = []
    for key in per_rank[0]:
        lists = [k[key] for k in per_rank]
        assert len({len(k) for k in lists}) == 1, [len(k) for k in lists]
        for ks in zip(*lists, strict=True):
            starts, ends = [k[0] for k in ks], [k[1] for k in ks]
            skew = max(starts) - min(starts)
            out.append({"first": min(starts), "late_rank": starts.index(max(starts)) if skew >= TOGETHER_NS else -1,
                        "skew_ns": skew, "end_spread_ns": max(ends) - min(ends)})
    return sorted(out, key=lambda h: h["first"])


def steps_by_hand(name: str) -> dict[int, tuple[int, int]]:
    """Step N -> (slowest rank, its length in ns): on each rank, from the first start of the GPU work launched
    inside ProfilerStep#N to the first start of step N+1's (the last step: to its last end)."""
    lengths: dict[int, list[tuple[int, int]]] = {}
    for r in range(4):
        ev = events(name, r)
        ranges = [(e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1])) for e in ev
                  if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
        launched = {e["args"]["correlation"]: e["ts"] for e in ev
                    if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
        work: dict[int, list[tuple[int, int]]] = {}
        for e in ev:
            t = launched.get(e.get("args", {}).get("correlation")) if e.get("cat") in GPU_CATS else None
            for lo, hi, n in ranges:
                if t is not None and lo <= t <= hi:
                    start = round(e["ts"] * 1000)
                    work.setdefault(n, []).append((start, start + round(e["dur"] * 1000)))
        order = sorted(work)
        for i, n in enumerate(order):
            t0 = min(s for s, _ in work[n])
            t1 = min(s for s, _ in work[order[i + 1]]) if i + 1 < len(order) else max(e for _, e in work[n])
            lengths.setdefault(n, []).append((t1 - t0, r))
    return {n: (max(v)[1], max(v)[0]) for n, v in lengths.items()}


def close(a: int, b: int) -> bool:
    return abs(a - b) <= 1


@pytest.mark.parametrize("name", SETS)
def test_one_host_clock_is_shared_and_not_shifted(name: str) -> None:
    clock = report(name)["cross_rank"]["clock"]
    assert clock["shared_clock"] and not clock["applied"]
    assert report(name)["clock_offsets_ns"] == {"0": 0, "1": 0, "2": 0, "3": 0}


@pytest.mark.parametrize("name", NCCL_SETS)
def test_collectives_match_and_stragglers_by_hand(name: str) -> None:
    rep = report(name)
    hand = by_hand(name, "ncclDevKernel")
    ours = rep["cross_rank"]["collectives"]
    assert rep["cross_rank"]["n_matched"] == len(hand) == len(ours)
    for h, c in zip(hand, ours, strict=True):
        assert c["n_ranks"] == 4 and c["late_rank"] == h["late_rank"], (c, h)
        assert close(c["skew_ns"], h["skew_ns"]) and close(c["end_spread_ns"], h["end_spread_ns"]), (c, h)
    median_spread = statistics.median(h["end_spread_ns"] for h in hand)
    assert abs(rep["cross_rank"]["clock"]["residual_skew_ns"] - median_spread) <= 1
    last = Counter(h["late_rank"] for h in hand if h["late_rank"] >= 0)
    assert {s["rank"]: s["n_last"] for s in rep["stragglers"]["ranks"]} == {r: last.get(r, 0) for r in range(4)}


def test_fsdp_figures_worked_out_once() -> None:
    """The same figures for sample_traces/four-gpus/fsdp, written down: 18 collectives (2 steps × 3 modules ×
    (2 all-gathers + 1 reduce-scatter)); ranks 2, 0 and 3 last at 9, 8 and 1 of them; the worst lead 4.05 ms
    (rank 2, the 13th); the ends 38.8 µs apart (median)."""
    hand = by_hand("fsdp", "ncclDevKernel")
    assert len(hand) == 18
    assert Counter(h["late_rank"] for h in hand) == {2: 9, 0: 8, 3: 1}
    worst = max(range(18), key=lambda i: hand[i]["skew_ns"])
    assert (worst, hand[worst]["late_rank"], hand[worst]["skew_ns"] // 1000) == (12, 2, 4050)
    assert statistics.median(h["end_spread_ns"] for h in hand) // 100 == 388


@pytest.mark.parametrize("name", SETS)
def test_step_lengths_and_where_the_critical_path_ends(name: str) -> None:
    cp = report(name)["critical_path"]
    hand = steps_by_hand(name)
    measured = {s["step"]: s["measured_ns"] for s in cp["fidelity"]["steps"]}
    assert sorted(measured) == sorted(hand) == [1, 2]
    for step, (_rank, length) in hand.items():
        assert close(measured[step], length), (step, measured[step], length)
    if name in NCCL_SETS:  # replayed within 0.07 % of the measured steps: the path ends on the slowest rank
        assert max(abs(s["error"]) for s in cp["fidelity"]["steps"]) < 1e-3
        assert {s["step"]: s["rank"] for s in cp["steps"]} == {n: r for n, (r, _) in hand.items()}


@pytest.mark.parametrize("name", ["ag-gemm", "gemm-rs", "symm-mem"])
def test_symmetric_memory_barriers_match_by_hand(name: str) -> None:
    """Copy-engine sets: the barrier kernels are the collectives; each rank's i-th barrier meets its peers' i-th."""
    hand = by_hand(name, BARRIER, by_stream=True)
    ours = sorted((c for c in report(name)["cross_rank"]["collectives"] if BARRIER in c["coll_name"]),
                  key=lambda c: c["first_start_ns"])
    assert len(ours) == len(hand) > 0
    for h, c in zip(hand, ours, strict=True):
        assert c["late_rank"] == h["late_rank"] and close(c["skew_ns"], h["skew_ns"]), (c, h)


def test_the_sets_are_four_ranks_of_one_run() -> None:
    for name in SETS:
        manifest = json.loads((FOUR / name / "manifest.json").read_text())
        assert manifest["world_size"] == 4 and sorted(manifest["traces"]) == ["0", "1", "2", "3"]
        assert {Path(p).name for p in (FOUR / name).glob("rank*.json.gz")} == {f"rank{r}.json.gz" for r in range(4)}
