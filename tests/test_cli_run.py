"""`overlapscope run` / `sweep` on CPU (gloo): the CLI runs, analyzes, and fails with exit 4 naming the rank."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "overlapscope", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_run_writes_traces_and_prints_analysis(tmp_path):
    out = tmp_path / "run"
    r = cli("run", "ag-gemm", "--variant", "host-sync", "--out", str(out), "-f", "json", "M=64", "K=32", "N=16")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [x["rank"] for x in doc["ranks"]] == [0, 1]
    assert doc["timings_ms"]["variant_ms"] > 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["variant"] == "host-sync" and manifest["params"]["M"] == 64
    assert sorted(p.name for p in out.glob("rank*.json.gz")) == ["rank0.json.gz", "rank1.json.gz"]


def test_relative_out_is_the_callers_directory(tmp_path):
    """The ranks run in the repository root; `--out run` still means ./run of the caller."""
    r = cli("run", "ag-gemm", "--variant", "baseline", "--out", "run", "--profiler", "none", "-f", "json",
            "M=64", "K=32", "N=16", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["variant"] == "baseline"
    assert not (ROOT / "run").exists()


def test_failed_rank_exits_4_and_names_it(tmp_path):
    out = tmp_path / "fail"
    r = cli("run", "ag-gemm", "--variant", "baseline", "--out", str(out), "--profiler", "none",
            "M=64", "K=32", "N=16", "fail_rank=1")
    assert r.returncode == 4
    assert "rank 1" in r.stderr and str(out) in r.stderr and "Traceback" not in r.stderr
    assert (out / "manifest.failed.json").exists()


def test_sweep_compares_variants(tmp_path):
    r = cli("sweep", "gemm-rs", "--variants", "baseline,ring", "--out", str(tmp_path / "sweep"), "-f", "json",
            "--profiler", "none", "iters=10")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc["timings_ms"]) == {"baseline", "ring"}
    assert [(g["workload"], g["baseline"]) for g in doc["groups"]] == [("matmul + reduce-scatter", "baseline")]
    assert json.loads((tmp_path / "sweep" / "sweep.json").read_text()) == doc
    t = doc["timings_ms"]["ring"]
    assert t["variant_spread_ms"] >= 0 and t["compute_spread_ms"] >= 0  # iters=10: two chunks of 5


def test_sweep_compares_each_workload_with_its_own_baseline(tmp_path, monkeypatch):
    """symm-mem runs two computations: the all-gather+matmul is not the reduce-scatter's baseline."""
    monkeypatch.setenv("COLUMNS", "250")  # table titles on one line
    r = cli("sweep", "symm-mem", "--variants", "fused-ag-matmul,fused-matmul-rs,two-stream", "--out",
            str(tmp_path / "s"), "--profiler", "torch", "iters=2", "profile_steps=1")
    assert r.returncode == 0, r.stderr
    assert "all-gather + matmul, baseline fused-ag-matmul" in r.stdout
    assert "matmul + reduce-scatter, baseline fused-matmul-rs" in r.stdout
    doc = json.loads((tmp_path / "s" / "sweep.json").read_text())
    groups = {g["workload"]: (g["baseline"], [v["variant"] for v in g["variants"]]) for g in doc["groups"]}
    assert groups == {"all-gather + matmul": ("fused-ag-matmul", ["fused-ag-matmul"]),
                      "matmul + reduce-scatter": ("fused-matmul-rs", ["fused-matmul-rs", "two-stream"])}
