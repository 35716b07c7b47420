"""`overlapscope app` stops as one process group: SIGTERM (or SIGINT) to the command leaves no server on the port.

The command starts `app/serve.py` as the leader of its own process group and forwards the signals that stop it
to that group; this starts the real command on the test samples, waits for the server to answer, signals the
command only, and checks that the server process is gone and the port no longer answers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app import data

from .app_server import app_answers
from .conftest import ROOT
from .test_app import make_samples
from .test_app_browser import free_port


def _children(pid: int) -> list[int]:
    """Processes whose parent is pid (Linux /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_the_command_stops_the_server(signum: int, tmp_path: Path, hta_dir: Path) -> None:
    samples = make_samples(tmp_path / "samples")
    env = dict(os.environ)
    env.update({data.ENV_SAMPLES: str(samples), data.ENV_RUNS_DIR: str(tmp_path / "runs"),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))})
    env.pop(data.ENV_ALLOWED_ROOTS, None)
    port = free_port()
    log = (tmp_path / "app.log").open("w")
    cli = subprocess.Popen([sys.executable, "-m", "overlapscope", "app", "--port", str(port)], cwd=ROOT, env=env,
                           stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while not app_answers(port):
            assert cli.poll() is None and time.monotonic() < deadline, (tmp_path / "app.log").read_text()[-2000:]
            time.sleep(0.3)
        servers = _children(cli.pid)
        assert servers, "the command runs the server as its child"
        cli.send_signal(signum)  # the command only, as a supervisor or `kill PID` does
        rc = cli.wait(timeout=30)
        assert rc == 0, (tmp_path / "app.log").read_text()[-2000:]
        deadline = time.monotonic() + 15
        while any(_alive(p) for p in servers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(p) for p in servers), "app/serve.py outlived the command"
        assert not app_answers(port), "something still serves the port"
    finally:
        if cli.poll() is None:
            cli.kill()
        for pid in _children(cli.pid):
            os.kill(pid, signal.SIGKILL)
