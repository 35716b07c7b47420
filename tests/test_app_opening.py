"""What the app opens on with no paths: the bundled pair that teaches most, a broken schedule and its fix.

The choice is checked against the traces themselves (the first has no overlap and a critical finding,
the second hides nearly all communication with nothing critical found), and a samples folder
without that pair still opens on its first two runs of one group. The menu is a reader's (no Deploy).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from analyzers.io.load import load_traces
from analyzers.report import analyze
from app import data

from .conftest import ROOT, SAMPLES


def _source(label: str, group: str) -> data.Source:
    return data.Source(key=f"sample:{label}", label=label, kind="sample", paths=(), group=group)


def test_opening_pair_is_a_broken_schedule_and_its_fix():
    samples = data.discover_samples(SAMPLES)
    keys = data.opening_samples(samples)
    assert keys == ["sample:ag-gemm/host-sync", "sample:ag-gemm/tuned"]
    by_key = {s.key: s for s in samples}
    broken, fixed = (analyze(load_traces(list(by_key[k].paths))) for k in keys)
    assert all(m.overlap_ratio == 0 for m in broken.ranks)
    assert {f.id for f in broken.findings if str(f.severity) == "critical"} == {"host-blocking-sync"}
    assert all(m.overlap_ratio > 0.9 for m in fixed.ranks)
    assert not [f for f in fixed.findings if str(f.severity) == "critical"]


def test_without_the_pair_the_first_group_opens():
    others = [_source("demo/kineto", "demo"), _source("demo/nsys", "demo"), _source("zeta/a", "zeta")]
    assert data.opening_samples(others) == ["sample:demo/kineto", "sample:demo/nsys"]
    only_one = [_source("ag-gemm/host-sync", "ag-gemm"), _source("ag-gemm/baseline", "ag-gemm"),
                _source("gemm-rs/tuned", "gemm-rs")]
    assert data.opening_samples(only_one) == ["sample:ag-gemm/host-sync", "sample:ag-gemm/baseline"]
    assert data.opening_samples([_source("x/solo", "x"), _source("y/other", "y")]) == ["sample:x/solo"]
    assert data.opening_samples([]) == []


def _toolbar_mode(cwd: Path, flags: list[str]) -> str:
    """client.toolbarMode as Streamlit resolves it in cwd (its .streamlit/config.toml), then with flags."""
    probe = ("import sys; from streamlit.web import bootstrap; from streamlit import config\n"
             "flags = dict(zip(sys.argv[1::2], sys.argv[2::2]))\n"
             "bootstrap.load_config_options({k.lstrip('-').replace('.', '_'): v for k, v in flags.items()})\n"
             "print(config.get_option('client.toolbarMode'))\n")
    done = subprocess.run([sys.executable, "-c", probe, *flags], cwd=cwd, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[-1]


def test_toolbar_is_in_viewer_mode_however_the_app_starts(tmp_path: Path):
    """`overlapscope app` (from any folder) and `streamlit run app/main.py` (from the clone) hide the developer
    items, Deploy among them; a bare `streamlit run` elsewhere keeps Streamlit's own default."""
    from overlapscope.cmd_app import streamlit_command

    cmd = streamlit_command([], port=8599, address="127.0.0.1", max_upload_mb=10)
    assert _toolbar_mode(tmp_path, cmd[cmd.index("--server.headless"):cmd.index("--")]) == "viewer"
    assert _toolbar_mode(ROOT, []) == "viewer"
    assert _toolbar_mode(tmp_path, []) == "auto"
