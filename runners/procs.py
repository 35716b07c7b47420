"""The torchrun process tree: environment, start in its own session, log pump, timeout, kill.

Everything the ranks print goes to OUT/launch.log; lines tagged with PREFIX are also passed
to the caller's progress callback. A timeout kills the whole process group (torchrun and
every rank), so no rank outlives its run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

PREFIX = "[overlapscope]"
REPO_ROOT = Path(__file__).resolve().parent.parent
KILL_GRACE_S = 10.0

ProgressFn = Callable[[str], None]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the whole process group (torchrun and every rank), SIGKILL what is left."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            # the leader is gone; make sure no rank outlives it
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return
        except subprocess.TimeoutExpired:
            continue


def execute(cmd: list[str], out: Path, timeout_s: float, on_progress: ProgressFn | None,
             env: dict[str, str]) -> tuple[int | None, Path, float]:
    """Run cmd in its own session; returns (exit code or None on timeout, log path, wall seconds)."""
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "launch.log"
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                cwd=str(REPO_ROOT), start_new_session=True)

        def pump() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                log.write(raw)
                log.flush()
                line = raw.decode(errors="replace").rstrip()
                if on_progress is not None and PREFIX in line:
                    on_progress(line[line.index(PREFIX) + len(PREFIX):].strip())

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            rc: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = None
            if on_progress is not None:
                on_progress(f"timeout after {timeout_s:.0f} s: stopping all ranks")
            kill_group(proc)
        else:
            try:  # children of a clean exit are gone; after a failure torchrun already stopped them
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        reader.join(timeout=10)
    return rc, log_path, time.monotonic() - t0
