"""Runner specs and torchrun command lines (no processes started, no torch needed except for one check)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runners import launch, results
from runners.specs import ALGORITHMS, COMMON


def test_algorithms_and_variants_as_documented() -> None:
    assert set(ALGORITHMS) == {"ag-gemm", "gemm-rs", "symm-mem", "fsdp", "thunder-fsdp"}
    need = {
        "ag-gemm": {"baseline", "sync-in-loop", "sync-before-loop", "host-sync", "tuned"},
        "gemm-rs": {"baseline", "collective-pipelined", "ring", "ring-uncoalesced", "tuned", "fused-ref"},
        "symm-mem": {"fused-ag-matmul", "fused-matmul-rs", "two-stream", "two-stream-sleep"},
        "fsdp": {"zero3", "zero2", "zero3-no-prefetch", "zero3-prefetch", "front-loaded"},
        "thunder-fsdp": {"baseline", "zero2-none", "zero2-block", "zero3-none", "zero3-block"},
    }
    for algo, variants in need.items():
        spec = ALGORITHMS[algo]
        assert variants <= set(spec.variants)
        assert spec.module == "runners." + algo.replace("-", "_")
        assert set(spec.cuda_only) <= set(spec.variants)
        for p in COMMON:
            assert p.name in spec.param_names


def test_defaults_are_small_on_cpu() -> None:
    gpu, cpu = ALGORITHMS["ag-gemm"].defaults(cuda=True), ALGORITHMS["ag-gemm"].defaults(cuda=False)
    assert gpu["M"] == 16384 and gpu["K"] == gpu["N"] == 8192
    assert cpu["M"] * cpu["K"] < gpu["M"] * gpu["K"] // 1000


def test_coerce_converts_cli_strings() -> None:
    spec = ALGORITHMS["ag-gemm"]
    assert spec.coerce({"m": "64", "tuned-comm": "nccl", "comm_priority": "0"}) == {
        "M": 64, "tuned_comm": "nccl", "comm_priority": 0}
    with pytest.raises(ValueError, match="not one of"):
        spec.coerce({"tuned_comm": "carrier-pigeon"})


def test_runner_flags_are_not_torchrun_abbreviations() -> None:
    """torchrun's parser takes '--m 5' for its own '--master-addr'/'--module': flags must not be prefixes."""
    pytest.importorskip("torch")
    from torch.distributed.run import get_args_parser

    torchrun = [o for a in get_args_parser()._actions for o in a.option_strings]
    flags = {"--variant", "--profiler", "--out"} | {p.flag for s in ALGORITHMS.values() for p in s.params}
    clashes = {f: [o for o in torchrun if o.startswith(f)] for f in flags}
    assert not {f: c for f, c in clashes.items() if c}


def test_command_for_torch_and_nsys(tmp_path: Path) -> None:
    cmd = launch.build_command("gemm-rs", ["ring"], nproc=4, profiler="torch", out=tmp_path,
                               params={"steps": 8}, python="py")
    assert cmd[:6] == ["py", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4"]
    assert cmd[6:8] == ["-m", "runners.gemm_rs"]
    assert cmd[cmd.index("--steps") + 1] == "8"
    ns = launch.build_command("ag-gemm", ["tuned"], nproc=2, profiler="nsys", out=tmp_path, params={},
                              nsys="/x/nsys", python="py")
    i = ns.index("--no-python")
    assert ns[i + 1:i + 3] == ["/x/nsys", "profile"]
    assert "--capture-range=cudaProfilerApi" in ns
    assert ns[ns.index("-o") + 1] == str(tmp_path / "rank%q{RANK}")
    assert ns[ns.index("py", i):][:3] == ["py", "-m", "runners.ag_gemm"]
    with pytest.raises(ValueError, match="nsys not found"):
        launch.build_command("ag-gemm", ["tuned"], nproc=2, profiler="nsys", out=tmp_path, params={})


def test_torchrun_summary_names_rank() -> None:
    log = ("Root Cause (first observed failure):\n[0]:\n  time      : x\n  host      : h\n"
           "  rank      : 3 (local_rank: 1)\n")
    assert launch.rank_from_torchrun_log(log) == 3
    assert launch.rank_from_torchrun_log("nothing here") is None


def test_sweep_groups_variants_by_workload() -> None:
    groups = launch.workload_groups("symm-mem", ["two-stream", "fused-ag-matmul", "fused-matmul-rs"])
    assert groups == [("matmul + reduce-scatter", "two-stream", ["two-stream", "fused-matmul-rs"]),
                      ("all-gather + matmul", "fused-ag-matmul", ["fused-ag-matmul"])]
    # --baseline applies to its own workload only; the others keep theirs
    groups = launch.workload_groups("symm-mem", list(ALGORITHMS["symm-mem"].variants), baseline="two-stream-sleep")
    assert [(w, b) for w, b, _ in groups] == [("all-gather + matmul", "fused-ag-matmul"),
                                              ("matmul + reduce-scatter", "two-stream-sleep")]
    # one workload: the variant named baseline, wherever it stands
    assert launch.workload_groups("gemm-rs", ["tuned", "baseline", "ring"]) == [
        ("matmul + reduce-scatter", "baseline", ["tuned", "baseline", "ring"])]


def test_spread_is_half_the_range_of_chunk_medians() -> None:
    # chunks of 3: medians 2, 5, 3 -> (5 - 2) / 2; a trailing partial chunk is left out
    assert launch.chunk_spread_ms([1, 2, 9, 5, 4, 6, 3, 3, 0, 100], 3) == 1.5
    assert launch.chunk_spread_ms([1.0, 2.0, 3.0], 3) != launch.chunk_spread_ms([1.0, 2.0, 3.0], 3)  # NaN: 1 chunk


def test_spread_is_the_reported_ranks() -> None:
    """The reported median is the slowest rank's, so its spread is too (not the other rank's)."""
    manifest = {"timing_chunk": 2, "ranks": [
        {"timings_ms": {"variant": {"median": 1.0, "samples": [1, 1, 5, 5]}}},  # chunk medians 1, 5
        {"timings_ms": {"variant": {"median": 2.5, "samples": [1, 3, 2, 6]}}},  # chunk medians 2, 4
    ]}
    assert results.spread(manifest, "variant") == 1.0
    assert results.spread(manifest, "baseline") != results.spread(manifest, "baseline")  # NaN: not recorded


def test_user_command_shows_only_what_differs_from_the_defaults() -> None:
    from runners.commands import user_command
    from runners.specs import ALGORITHMS as ALGOS

    gpu = {**ALGOS["gemm-rs"].defaults(cuda=True), "backend": "nccl", "dtype": "bf16"}  # a manifest's params
    assert user_command("gemm-rs", ["tuned"], gpu) == ["overlapscope", "run", "gemm-rs", "--variant", "tuned"]
    changed = {**gpu, "M": 8192, "dtype": "fp16", "graph": True, "fail_rank": 1, "fail_phase": "timing"}
    assert user_command("gemm-rs", ["tuned"], changed, nproc=4, profiler="nsys", out="o") == [
        "overlapscope", "run", "gemm-rs", "--variant", "tuned", "--nproc", "4", "--profiler", "nsys", "--out", "o",
        "M=8192", "graph=true", "dtype=fp16", "fail_rank=1", "fail_phase=timing"]
    # a CPU run's small sizes are its defaults; there, fp32 and gloo are what auto picks
    cpu = {**ALGOS["ag-gemm"].defaults(cuda=False), "backend": "gloo", "dtype": "fp32", "M": 64}
    assert user_command("ag-gemm", ["baseline", "tuned"], cpu, cuda=False) == [
        "overlapscope", "sweep", "ag-gemm", "--variants", "baseline,tuned", "M=64"]
    # a manifest from an algorithm this version does not know: only the shared defaults drop out
    other = {"size": 3, "fail_rank": -1, "hang_phase": "setup", "corrupt_rank": 0}
    assert user_command("demo", ["x"], other)[5:] == ["size=3", "corrupt_rank=0"]


def test_no_shown_command_names_a_test_hook_left_at_its_default() -> None:
    """Every algorithm, GPU and CPU defaults: the hooks never appear unless set."""
    from runners.commands import user_command
    from runners.specs import ALGORITHMS as ALGOS

    hooks = [p.name for p in COMMON if p.name.endswith(("_rank", "_phase"))]
    assert len(hooks) == 9
    for algo, spec in ALGOS.items():
        for cuda in (True, False):
            cmd = user_command(algo, ["x"], spec.defaults(cuda), cuda=cuda)
            assert not [a for a in cmd if a.split("=")[0] in hooks], (algo, cuda, cmd)
