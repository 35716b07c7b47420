"""`overlapscope whatif` and what `analyze` shows of the dependency graph (critical path, savings)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .inprocess import cli

ROOT = Path(__file__).resolve().parents[1]
HOST_SYNC = str(ROOT / "sample_traces" / "ag-gemm" / "host-sync")
SYNC_BEFORE_LOOP = str(ROOT / "sample_traces" / "ag-gemm" / "sync-before-loop")  # host-sync without its syncs


def test_whatif_json_predicts_the_step_without_host_syncs():
    r = cli("whatif", HOST_SYNC, "--fix", "host-syncs", "-f", "json", "--no-cache")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["fixes"] == ["host-syncs"]
    for key in ("measured_step_ns", "replayed_step_ns", "predicted_step_ns", "per_step", "per_rank", "fidelity"):
        assert key in doc
    # the replay reproduces the measured step; removing the per-step host syncs shortens it by the idle
    # time they leave between GEMMs (the GPU stays busy; each all-gather still waits for the GEMM's SMs)
    assert abs(doc["replayed_step_ns"] - doc["measured_step_ns"]) <= 0.03 * doc["measured_step_ns"]
    # the prediction lands within 10 % of the step the fixed program measured in its own run
    fixed = json.loads(cli("analyze", SYNC_BEFORE_LOOP, "-f", "json").stdout)["critical_path"]["fidelity"]
    assert abs(doc["predicted_step_ns"] - fixed["measured_step_ns"]) <= 0.10 * fixed["measured_step_ns"]
    assert doc["saving_ns"] > 0.05 * doc["replayed_step_ns"] and doc["saving_fraction"] > 0.05
    assert [p["rank"] for p in doc["per_rank"]] == [0, 1] and len(doc["per_step"]) == 3


def test_whatif_several_fixes_and_markdown():
    r = cli("whatif", HOST_SYNC, "--fix", "host-syncs", "--fix", "compute-speed=2", "-f", "md", "--no-cache")
    assert r.returncode == 0, r.stderr
    assert "# What if: host-syncs, compute-speed=2" in r.stdout and "| predicted step |" in r.stdout


def test_whatif_unknown_fix_is_one_line_exit_3():
    r = cli("whatif", HOST_SYNC, "--fix", "faster")
    assert r.returncode == 3
    assert r.stderr.strip().count("\n") == 0 and "unknown fix 'faster'" in r.stderr


def test_analyze_json_prices_findings_and_has_the_critical_path():
    r = cli("analyze", HOST_SYNC, "-f", "json", "--no-cache")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    cp = doc["critical_path"]
    assert cp["fidelity"]["within_target"]
    for step in cp["steps"]:
        assert sum(step["parts"].values()) == step["replayed_ns"]
    assert set(cp["per_rank"]) == {"0", "1"} and cp["critical_rows_n"]["0"] > 0
    found = doc["findings"]
    assert found and all("saving_ns" in f for f in found)
    syncs = [f for f in found if f["id"] == "host-blocking-sync"]
    assert syncs and syncs[0]["saving_ns"] > 0 and syncs[0]["saving_fix"] == "host-syncs"
    savings = [f["saving_ns"] for f in found if f["saving_ns"] is not None]
    assert savings == sorted(savings, reverse=True)


def test_analyze_table_and_md_show_the_critical_path_and_savings():
    r = cli("analyze", HOST_SYNC, "-f", "md", "--no-cache")
    assert r.returncode == 0, r.stderr
    assert "### critical path" in r.stdout and "fixing this saves ≈" in r.stdout
    r = cli("analyze", HOST_SYNC, "--no-cache")
    assert r.returncode == 0 and "critical path per step" in r.stdout and "saves / step" in r.stdout


def test_whatif_repeated_question_is_answered_from_the_report_cache(tmp_path):
    """The same question on unchanged files: the cached answer, the same bytes; another fix order is another
    question; a changed file is analyzed again."""
    import os
    import shutil

    folder = tmp_path / "set"
    shutil.copytree(HOST_SYNC, folder)
    env = {**os.environ, "OVERLAPSCOPE_CACHE_DIR": str(tmp_path / "cache")}

    def ask(*fixes: str) -> str:
        args = [a for f in fixes for a in ("--fix", f)]
        r = subprocess.run([sys.executable, "-m", "overlapscope", "whatif", str(folder), *args, "-f", "json"],
                           cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr
        return r.stdout

    def entries() -> int:
        reports = tmp_path / "cache" / "reports"
        found = reports.rglob("*") if reports.exists() else []
        return sum(1 for p in found if p.is_dir() and not p.name.startswith("."))

    first = ask("host-syncs", "peer-wait")
    n = entries()
    assert n >= 1 and ask("host-syncs", "peer-wait") == first and entries() == n  # a hit: nothing new stored
    # a hit loads no analysis stack: the fixes are parsed (which imports the graph, hence pandas) only on a miss
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "overlapscope", "whatif", str(folder), "--fix",
                        "host-syncs", "--fix", "peer-wait", "-f", "json"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, env=env)
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert r.returncode == 0 and r.stdout == first and "overlapscope.cmd_whatif" in imported
    assert not {"pandas", "analyzers.graph.fixes"} & imported
    swapped = json.loads(ask("peer-wait", "host-syncs"))
    assert swapped["fixes"] == ["peer-wait", "host-syncs"] and entries() > n
    rank0 = next(folder.glob("rank0*"))
    os.utime(rank0, ns=(rank0.stat().st_atime_ns, rank0.stat().st_mtime_ns + 10**9))  # touched, same bytes
    m = entries()
    assert ask("host-syncs", "peer-wait") == first and entries() == m  # keyed by content: still a hit
