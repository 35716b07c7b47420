"""thunder-fsdp: Thunder's own FSDP as a runner. What a machine without GPUs can check: its spec, its
command lines, what its manifest says of Thunder's traces, and that the rank really imports Thunder
(where lightning-thunder does not import, the run fails naming the package; where it does, every
variant runs on gloo and matches the replicated baseline)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from runners import launch
from runners.commands import user_command
from runners.specs import ALGORITHMS

torch = pytest.importorskip("torch")

from runners import thunder_fsdp  # noqa: E402

SPEC = ALGORITHMS["thunder-fsdp"]


def _thunder_imports() -> bool:
    """Whether lightning-thunder imports here (0.2.6 fails on torch releases it predates, with AttributeError)."""
    if importlib.util.find_spec("thunder") is None:
        return False
    done = subprocess.run([sys.executable, "-c", "import thunder.distributed"], capture_output=True, timeout=300)
    return done.returncode == 0


def test_variants_are_thunders_own_switches() -> None:
    assert set(SPEC.variants) == {"baseline", "zero2-none", "zero2-block", "zero3-none", "zero3-block"}
    assert thunder_fsdp.strategies("zero2-none") == ("ZERO2", "NONE")
    assert thunder_fsdp.strategies("zero3-block") == ("ZERO3", "BLOCK")
    gpu = SPEC.defaults(cuda=True)
    assert gpu["dim"] % gpu["heads"] == 0 and gpu["ffn"] > gpu["dim"]
    # every parameter's first dimension splits evenly over 2, 4 and 8 ranks at the GPU defaults (no padding)
    with torch.device("meta"):  # shapes only, no 300 M parameters in memory
        model = thunder_fsdp.LlamaStack(1, int(gpu["dim"]), int(gpu["heads"]), int(gpu["ffn"]))
    assert {p.shape[0] % 8 for p in model.parameters()} == {0}


def test_command_lines() -> None:
    cmd = launch.build_command("thunder-fsdp", ["zero2-none", "zero3-block"], nproc=4, profiler="torch",
                               out=Path("o"), params={"layers": 4}, python="py")
    assert cmd[:8] == ["py", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4", "-m",
                       "runners.thunder_fsdp"]
    assert cmd[cmd.index("--variant") + 1] == "zero2-none,zero3-block"
    assert cmd[cmd.index("--layers") + 1] == "4"
    gpu = {**SPEC.defaults(cuda=True), "backend": "nccl", "dtype": "bf16"}
    assert user_command("thunder-fsdp", ["zero3-none"], gpu) == ["overlapscope", "run", "thunder-fsdp",
                                                                  "--variant", "zero3-none"]
    assert launch.workload_groups("thunder-fsdp", list(SPEC.variants))[0][1] == "baseline"


def test_trace_summary_counts_by_hand() -> None:
    """A forward trace as Thunder's torch executor names it: 3 gathers (with their waits) before the first linear."""
    names = ["unpack_trivial", "all_gather_prim_impl", "all_gather_prim_impl", "all_gather_prim_impl",
             "wait_prim_impl", "wait_prim_impl", "linear", "wait_prim_impl", "linear", "matmul",
             "pack_for_fsdp_prim_impl", "reduce_scatter_prim_impl", "unpack_for_fsdp", "python_return"]
    assert thunder_fsdp.trace_summary(names) == {
        "symbols": 14, "all_gathers": 3, "reduce_scatters": 1, "all_reduces": 0, "waits": 3, "matmuls": 3,
        "packs": 2, "all_gathers_before_first_matmul": 3}
    assert thunder_fsdp.trace_summary(["linear", "all_gather_prim_impl"])["all_gathers_before_first_matmul"] == 0


def test_manifest_facts_name_version_executors_and_traces() -> None:
    """thunder_facts on a stand-in for the thunder module: what the manifest's workload.thunder holds."""
    ex = [SimpleNamespace(name="sdpa"), SimpleNamespace(name="torch")]
    trace = SimpleNamespace(bound_symbols=[SimpleNamespace(sym=SimpleNamespace(name=n))
                                           for n in ("all_gather_prim_impl", "wait_prim_impl", "linear")])
    fake = SimpleNamespace(__version__="9.9", get_default_executors=lambda: ex[:1],
                           get_always_executors=lambda: ex[1:],
                           compile_data=lambda m: SimpleNamespace(executors_list=ex),
                           last_traces=lambda m: [trace], last_backward_traces=lambda m: [])
    facts = thunder_fsdp.thunder_facts(fake, torch.nn.Linear(2, 2))
    assert facts["version"] == "9.9" and facts["executors"] == ["sdpa", "torch"]
    assert facts["default_executors"] == ["sdpa"] and facts["always_executors"] == ["torch"]
    assert facts["forward_trace"]["all_gathers_before_first_matmul"] == 1
    assert facts["backward_trace"] == {"unavailable": "IndexError: list index out of range"}


def test_the_rank_imports_thunder(tmp_path: Path) -> None:
    """No stand-in: the ranks import lightning-thunder, and run or fail on what they find."""
    if _thunder_imports():
        results = launch.sweep("thunder-fsdp", list(SPEC.variants), nproc=2, profiler="none", out=tmp_path,
                               params={}, timeout_s=600)
        for res in results.values():
            m = res.manifest
            assert m["workload"]["thunder"]["version"]
            assert all(r["rel_error"] <= m["rel_error_bound"] for r in m["ranks"])
        return
    with pytest.raises(launch.RunFailed) as failed:
        launch.run("thunder-fsdp", "zero2-none", nproc=2, profiler="none", out=tmp_path, params={},
                   timeout_s=240)
    assert "lightning-thunder" in str(failed.value)
