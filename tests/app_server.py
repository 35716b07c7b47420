"""A real `overlapscope app` server for the browser tests: its own runs and cache folders, no inherited paths."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from app import data

from .conftest import ROOT
from .test_app_browser import free_port


def start_app(paths: list[Path], tmp: Path) -> tuple[subprocess.Popen, str]:
    """`overlapscope app PATHS` on a free port, once its health check answers: (the process, its URL)."""
    env = dict(os.environ)
    env.update({data.ENV_RUNS_DIR: str(tmp / "runs"), "OVERLAPSCOPE_CACHE_DIR": str(tmp / "cache"),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))})
    for var in (data.ENV_ALLOWED_ROOTS, data.ENV_APP_PATHS, data.ENV_SAMPLES):
        env.pop(var, None)
    port = free_port()
    log = (tmp / "app.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "overlapscope", "app", *map(str, paths), "--port", str(port)],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while not app_answers(port):
        assert proc.poll() is None and time.monotonic() < deadline, (tmp / "app.log").read_text()[-2000:]
        time.sleep(0.3)
    return proc, f"http://127.0.0.1:{port}"


def app_answers(port: int) -> bool:
    """Whether the server on port answers its health check."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False
