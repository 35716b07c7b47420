"""The Run page's button end to end: reproduce a sample and add the new run to the sidebar.

Real GPUs are not here, so the machine is made to *look* like it has two (a stand-in
nvidia-smi on PATH, the page's only GPU check); the runner itself then falls back to gloo on
CPU, which exercises the same path: build the command, run it, stream its output, pick up
the new run's manifest.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app import data

from .forked_ranks import ranks_forked

ROOT = Path(__file__).resolve().parents[1]
MAIN = str(ROOT / "app" / "main.py")


@pytest.fixture()
def cpu_sample(tmp_path: Path) -> Path:
    """The sample the button reproduces, made with the ranks forked from this process (tests/forked_ranks.py); the
    button's own run is the real `overlapscope run` and torchrun."""
    from runners import launch

    samples = tmp_path / "samples"
    with ranks_forked():
        launch.run("ag-gemm", "host-sync", nproc=2, profiler="torch", out=samples / "ag-gemm" / "host-sync",
                   params={"M": 64, "K": 32, "N": 16, "iters": 2, "warmup": 1}, timeout_s=300)
    return samples


def test_run_button_reproduces_a_sample(cpu_sample: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from streamlit.testing.v1 import AppTest

    fake = tmp_path / "bin"
    fake.mkdir()
    smi = fake / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: stand-in (UUID: GPU-0)'\necho 'GPU 1: stand-in (UUID: GPU-1)'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(data.ENV_SAMPLES, str(cpu_sample))
    monkeypatch.delenv(data.ENV_ALLOWED_ROOTS, raising=False)
    monkeypatch.delenv(data.ENV_APP_PATHS, raising=False)
    monkeypatch.setenv(data.ENV_RUNS_DIR, str(tmp_path / "runs"))

    at = AppTest.from_file(MAIN, default_timeout=300)
    at.run()
    at.switch_page("views/run.py").run()
    assert not at.exception
    out = tmp_path / "runs" / "again"
    at.text_input(key="run_out").set_value(str(out)).run()
    assert "run_go" in [b.key for b in at.button]
    at.button(key="run_go").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("1 run(s) added" in s.value for s in at.success), [s.value for s in at.success]
    made = out  # `overlapscope run --out OUT` writes the run into OUT
    assert (made / "manifest.json").exists() and sorted(p.name for p in made.glob("rank*.json.gz")) == [
        "rank0.et.json.gz", "rank0.json.gz", "rank1.et.json.gz", "rank1.json.gz"]  # each trace and its ET
    assert any(k.startswith("run:") for k in at.session_state["os_selected"])


def test_a_folder_of_runs_becomes_one_source_per_run() -> None:
    samples = ROOT / "sample_traces" / "ag-gemm"
    runs = sorted(m.parent.name for m in samples.glob("*/manifest.json"))
    got = data.sources_from_paths([str(samples)])
    assert sorted(s.label.split("/")[-1] for s in got) == runs and len(runs) >= 4
    assert all(s.manifest_path for s in got)
