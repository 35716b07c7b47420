"""docs/seeds.md's claims about Lightning Thunder's FSDP, checked on the bundled traces
(sample_traces/thunder-fsdp/, 2 × H200, lightning-thunder 0.2.6, 2 profiled steps each)."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from functools import cache

from analyzers.io.load import load_traces
from analyzers.report import analyze

from .conftest import SAMPLES

THUNDER = SAMPLES / "thunder-fsdp"
FSDP_VARIANTS = ["zero2-none", "zero2-block", "zero3-none", "zero3-block"]


@cache
def kernel_counts(variant: str, rank: int) -> Counter:
    with gzip.open(THUNDER / variant / f"rank{rank}.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    return Counter(e["name"].split("(")[0] for e in events if e.get("cat") == "kernel")


def collectives(variant: str, rank: int) -> dict[str, int]:
    return {k: n for k, n in kernel_counts(variant, rank).items() if k.startswith("ncclDevKernel")}


def test_the_four_switches_run_the_same_collectives() -> None:
    """ZeRO-3 = ZeRO-2 and BLOCK = NONE in 0.2.6: 37 all-gathers and 37 reduce-scatters per step, every variant."""
    for rank in (0, 1):
        seen = {v: collectives(v, rank) for v in FSDP_VARIANTS}
        assert all(c == seen["zero2-none"] for c in seen.values()), seen
        assert sorted(seen["zero2-none"].values()) == [74, 74]  # 2 profiled steps
        for v in FSDP_VARIANTS:
            manifest = json.loads((THUNDER / v / "manifest.json").read_text())["workload"]["thunder"]
            assert manifest["version"] == "0.2.6"
            assert manifest["forward_trace"]["all_gathers"] == 37 and manifest["backward_trace"]["all_gathers"] == 0
            assert manifest["backward_trace"]["reduce_scatters"] == 37 and manifest["forward_trace"]["packs"] == 0


def test_no_bucketing_copies_beside_the_gathers() -> None:
    """No CatArrayBatchedCopy in any FSDP variant; the direct copies are as many as in the replicated baseline."""
    for rank in (0, 1):
        base = kernel_counts("baseline", rank)
        for v in FSDP_VARIANTS:
            counts = kernel_counts(v, rank)
            assert not any("CatArrayBatchedCopy" in k for k in counts)
            copies = sum(n for k, n in counts.items() if "direct_copy_kernel" in k)
            assert copies == sum(n for k, n in base.items() if "direct_copy_kernel" in k) == 322


def test_zero2_without_bucketing_front_loads_its_gathers() -> None:
    """The seed's first observation, found by the analysis: the all-gathers run before the compute on both
    ranks, as Thunder's own forward trace orders them (all 37 before the first matmul)."""
    rep = analyze(load_traces([THUNDER / "zero2-none"]))
    found = {r for f in rep.findings if f.id == "front-loaded-collectives" for r in f.ranks}
    assert found == {0, 1}
    gaps = [f for f in rep.findings if f.id == "launch-bound-gaps"]
    assert gaps and gaps[0].evidence["n_gaps"] > 500
    trace = json.loads((THUNDER / "zero2-none" / "manifest.json").read_text())["workload"]["thunder"]["forward_trace"]
    assert trace["all_gathers_before_first_matmul"] == trace["all_gathers"] == 37


def test_the_copy_table_of_the_bucketing_seed() -> None:
    """docs/seeds.md's copy table (benchmarks/seed_copies.py): no bucketing copy, 322 direct copies in every set,
    and the direct copies beside an AllGather on one rank of each FSDP set only."""
    from benchmarks.seed_copies import copy_row

    beside = {}
    for v in ["baseline", *FSDP_VARIANTS]:
        ranks = load_traces([THUNDER / v]).ranks
        rows = {r: copy_row(ranks[r]) for r in (0, 1)}
        assert [rows[r]["cat"] for r in (0, 1)] == ([2, 2] if v == "baseline" else [0, 0])
        assert {rows[r]["direct"] for r in (0, 1)} == {322}
        beside[v] = [round(rows[r]["beside_gather_ms"], 3) for r in (0, 1)]
    assert beside == {"baseline": [0.0, 0.0], "zero2-none": [0.811, 0.0], "zero2-block": [0.0, 0.888],
                      "zero3-none": [0.0, 1.288], "zero3-block": [0.0, 0.79]}


def test_profiled_steps_and_the_largest_launch_gaps() -> None:
    """docs/seeds.md: the FSDP sets' profiled steps last 43.5-65.5 ms on the GPU (baseline 40.6-42.0), and their
    largest launch-bound gaps come before the optimizer's multi_tensor_apply_kernel, one elementwise kernel,
    direct copies and AllGathers (1.08-2.93 ms)."""
    spans, gaps = {}, {}
    for v in ["baseline", *FSDP_VARIANTS]:
        rep = analyze(load_traces([THUNDER / v]))
        it = [r.iteration_summary for r in rep.ranks]
        spans[v] = (min(i["iteration_ns_min"] for i in it) / 1e6, max(i["iteration_ns_worst"] for i in it) / 1e6)
        worst = max((f for f in rep.findings if f.id == "launch-bound-gaps"), key=lambda f: f.evidence["n_gaps"])
        gaps[v] = [(g["gap_ns"] / 1e6, g["next"]) for g in worst.evidence["largest"]]
    assert [round(x, 1) for x in spans["baseline"]] == [40.6, 42.0]
    fsdp = [x for v in FSDP_VARIANTS for x in spans[v]]
    assert round(min(fsdp), 1) == 43.5 and round(max(fsdp), 1) == 65.5
    optimizer = [ms for v in FSDP_VARIANTS for ms, name in gaps[v] if "multi_tensor_apply_kernel" in name]
    assert round(min(optimizer), 2) == 1.91 and round(max(optimizer), 2) == 2.76
    for v in ("zero2-none", "zero2-block", "zero3-none"):
        assert all("multi_tensor_apply_kernel" in name for _, name in gaps[v][:2])
    assert round(gaps["zero3-block"][0][0], 2) == 2.93 and "vectorized_elementwise_kernel" in gaps["zero3-block"][0][1]
    others = [ms for v in FSDP_VARIANTS for ms, name in gaps[v] if "direct_copy_kernel" in name or "AllGather" in name]
    assert round(min(others), 2) == 1.08 and round(max(others), 2) == 1.54
