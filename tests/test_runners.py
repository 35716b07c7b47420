"""Runners on CPU: every algorithm's variants on 2 gloo processes through runners.launch.

These are correctness runs (small sizes, no streams): each variant must match its
non-overlapped baseline, and a wrong answer must give RunFailed naming the rank. A failing, hanging or
killed rank is checked through `overlapscope run` (tests/test_cli_run.py), which reads the same RunFailed:
each torchrun launch costs seconds of torch start-up, so each failure is launched once in the suite.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from runners import launch  # noqa: E402
from runners.specs import ALGORITHMS  # noqa: E402

from .forked_ranks import forked_ranks  # noqa: E402, F401 - a fixture

TIMEOUT_S = 240.0


def _check_results(algo: str, results: dict[str, launch.RunResult]) -> None:
    assert set(results) == set(ALGORITHMS[algo].variants)
    for variant, res in results.items():
        m = res.manifest
        assert m["status"] == "ok" and m["algorithm"] == algo and m["variant"] == variant
        assert m["world_size"] == 2 and m["backend"] == "gloo"
        assert len(m["ranks"]) == 2
        for r in m["ranks"]:
            assert r["rel_error"] <= m["rel_error_bound"], (variant, r["rank"], r["rel_error"])
        t = res.timings
        assert min(t.variant_ms, t.compute_ms, t.comm_ms, t.baseline_ms) > 0
        assert (res.out_dir / "manifest.json").is_file()
        assert m["versions"]["torch"] == torch.__version__
        assert m["launch"]["command"][1:3] == ["-m", "torch.distributed.run"]
        assert m["launch"]["runners_digest"] == launch.runners_digest()


# thunder-fsdp runs where lightning-thunder imports (tests/test_runners_thunder.py checks both cases)
@pytest.mark.usefixtures("forked_ranks")
@pytest.mark.parametrize("algo", sorted(set(ALGORITHMS) - {"thunder-fsdp"}))
def test_every_variant_on_two_cpu_processes(algo: str, tmp_path: Path) -> None:
    results = launch.sweep(algo, list(ALGORITHMS[algo].variants), nproc=2, profiler="none", out=tmp_path,
                           params={}, timeout_s=TIMEOUT_S)
    _check_results(algo, results)
    if algo == "symm-mem":  # CUDA-only variants say which fallback ran
        for res in results.values():
            assert "fallback" in res.manifest["workload"]
    for variant in ALGORITHMS[algo].cuda_only:
        assert "fallback" in results[variant].manifest["workload"], (algo, variant)


@pytest.mark.usefixtures("forked_ranks")
@pytest.mark.parametrize(("algo", "variants", "params"), [
    ("gemm-rs", "ring,ring-uncoalesced,collective-pipelined,tuned", {"steps": 3, "M": 144, "K": 96}),
    ("symm-mem", "two-stream,two-stream-sleep", {"steps": 2, "M": 192, "K": 96}),
    ("ag-gemm", "sync-before-loop,tuned", {"steps": 2, "M": 96}),
])
def test_three_ranks_reorder_reductions(algo: str, variants: str, params: dict[str, int], tmp_path: Path) -> None:
    """With 3 ranks the ring/exchange order really differs from the collective's (not commutative pairs)."""
    results = launch.sweep(algo, variants.split(","), nproc=3, profiler="none", out=tmp_path, params=params,
                           timeout_s=TIMEOUT_S)
    for res in results.values():
        assert all(r["rel_error"] <= res.manifest["rel_error_bound"] for r in res.manifest["ranks"])


def test_torch_profiler_writes_traces_and_manifest(tmp_path: Path) -> None:
    progress: list[str] = []
    res = launch.run("ag-gemm", "tuned", nproc=2, profiler="torch", out=tmp_path, params={"profile_steps": 2},
                     timeout_s=TIMEOUT_S, on_progress=progress.append)
    assert sorted(res.traces) == [0, 1]
    for rank, path in res.traces.items():
        assert path == tmp_path / f"rank{rank}.json.gz" and path.is_file()
        with gzip.open(path, "rt") as f:
            trace = json.load(f)
        assert trace["distributedInfo"]["rank"] == rank
        steps = sorted({e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")})
        assert steps == ["ProfilerStep#1", "ProfilerStep#2"]
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert m["traces"] == {"0": "rank0.json.gz", "1": "rank1.json.gz"}
    assert m["params"]["profile_steps"] == 2 and m["profiler"] == "torch"
    assert any("relative error" in line for line in progress)


def test_wrong_output_fails_the_correctness_check(tmp_path: Path) -> None:
    with pytest.raises(launch.RunFailed) as info:
        launch.run("ag-gemm", "sync-before-loop", nproc=2, profiler="none", out=tmp_path,
                   params={"corrupt_rank": 0}, timeout_s=TIMEOUT_S)
    assert info.value.rank == 0
    assert "CorrectnessError" in str(info.value) and "relative error above" in str(info.value)


def test_bad_arguments_fail_before_launching(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown algorithm"):
        launch.run("nope", "x", nproc=2, profiler="none", out=tmp_path)
    with pytest.raises(ValueError, match="unknown variant"):
        launch.run("ag-gemm", "nope", nproc=2, profiler="none", out=tmp_path)
    with pytest.raises(KeyError, match="unknown parameter"):
        launch.run("ag-gemm", "tuned", nproc=2, profiler="none", out=tmp_path, params={"bogus": 1})
    with pytest.raises(ValueError, match="expected int"):
        launch.run("ag-gemm", "tuned", nproc=2, profiler="none", out=tmp_path, params={"M": "big"})
    assert not (tmp_path / "launch.log").exists()


def test_runners_digest_follows_the_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The digest names the runner code that ran, even where .git is missing or stale."""
    (tmp_path / "runners").mkdir()
    (tmp_path / "runners" / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(launch, "REPO_ROOT", tmp_path)
    first = launch.runners_digest()
    assert len(first) == 16 and first == launch.runners_digest()
    (tmp_path / "runners" / "a.py").write_text("x = 2\n")
    assert launch.runners_digest() != first
