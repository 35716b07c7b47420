"""`overlapscope app [PATH...]`: start the Streamlit dashboard (app/main.py) in a subprocess, stopped as one
process group.

Streamlit is never imported here: the CLI stays importable without the [app] extra, and
the dashboard runs in its own process as `python app/serve.py -- PATH...` (`streamlit run app/main.py`
that loads the runs as the server starts).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from analyzers.errors import BadInputError

from .common import EXIT_USAGE, err_console
from .extras import DASHBOARD, require_app_extra

APP_SCRIPT = Path(__file__).resolve().parents[1] / "app" / "serve.py"  # streamlit run app/main.py, warmed


def streamlit_command(paths: list[Path], *, port: int, address: str, max_upload_mb: int) -> list[str]:
    """The server's command line: `streamlit run` options (headless: the user opens the printed URL)."""
    return [
        sys.executable, str(APP_SCRIPT),
        "--server.headless", "true",
        "--server.port", str(port),
        "--server.address", address,
        "--server.maxUploadSize", str(max_upload_mb),
        "--server.enableXsrfProtection", "true",  # uploads need Streamlit's XSRF token, whatever a config says
        "--browser.gatherUsageStats", "false",
        "--client.toolbarMode", "viewer",  # a dashboard for readers: no Deploy, rerun or clear-cache items
        "--server.fileWatcherType", "none",  # nobody edits the dashboard's source under it: no module watching
        "--",
        *[str(p) for p in paths],
    ]


def app_cmd(
    paths: Annotated[list[str] | None, typer.Argument(
        help="Runs to open: run folders or trace files (files of one folder form one run). "
             "Without paths: the bundled sample traces.", show_default=False)] = None,
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port to serve on.")] = 8501,
    address: Annotated[str, typer.Option(
        "--address", help="Address to bind. The default serves this machine only; 0.0.0.0 serves every machine "
                          "that can reach it (anyone there can open the traces under the allowed roots and upload).")
    ] = "127.0.0.1",
    allowed_root: Annotated[list[Path] | None, typer.Option(
        "--allowed-root", help="Server folder the browser may open paths under (repeatable; default: the "
                               "sample traces and the given paths).")] = None,
    max_upload_mb: Annotated[int | None, typer.Option(
        "--max-upload-mb", min=1, max=1 << 20,
        help="Upload size cap in MB (default $OVERLAPSCOPE_MAX_UPLOAD_MB or 200).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the command instead of starting it.")] = False,
) -> None:
    """Open the dashboard: overview, timeline, cross-rank, stragglers, syncs, collectives, diff, run."""
    require_app_extra("the dashboard", DASHBOARD)
    resolved = []
    for raw in paths or []:
        p = Path(raw).expanduser()
        if not p.exists():
            raise BadInputError(p, "no such file or directory")
        resolved.append(p.resolve())
    env = dict(os.environ)
    limit = max_upload_mb or int(env.get("OVERLAPSCOPE_MAX_UPLOAD_MB") or 200)
    if limit < 1:
        err_console.print("overlapscope: usage error: --max-upload-mb must be >= 1", markup=False)
        raise typer.Exit(EXIT_USAGE)
    env["OVERLAPSCOPE_MAX_UPLOAD_MB"] = str(limit)
    env["OVERLAPSCOPE_APP_PATHS"] = os.pathsep.join(str(p) for p in resolved)
    if allowed_root:
        env["OVERLAPSCOPE_ALLOWED_ROOTS"] = os.pathsep.join(str(p.expanduser().resolve()) for p in allowed_root)
    repo = str(APP_SCRIPT.parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [repo, env.get("PYTHONPATH")]))
    cmd = streamlit_command(resolved, port=port, address=address, max_upload_mb=limit)
    if dry_run:
        sys.stdout.write(shlex.join(cmd) + "\n")
        return
    err_console.print(f"overlapscope app: http://{address}:{port}  (Ctrl-C stops it)", markup=False,
                      highlight=False)
    rc = serve(cmd, env)
    if rc not in STOPPED:
        raise typer.Exit(rc)


STOPPED = (0, -signal.SIGINT, -signal.SIGTERM, 128 + signal.SIGINT, 128 + signal.SIGTERM)  # stopped on request
GRACE_S = 10.0  # how long the server may take to stop before its group is killed
FORWARDED = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


def serve(cmd: list[str], env: dict[str, str]) -> int:
    """Run the server as the leader of its own process group and stop that group as one: a signal that stops
    this command (Ctrl-C, SIGTERM from a supervisor, SIGHUP) goes to the server and its parse workers, a group
    still there GRACE_S later is killed, and whatever of the group outlives the server is ended with it, so no
    server is left on the port."""
    group = hasattr(os, "killpg")
    proc = subprocess.Popen(cmd, env=env, start_new_session=group)
    stop_asked: list[float] = []

    def forward(signum: int, _frame: object) -> None:
        stop_asked.append(time.monotonic())
        _signal_group(proc, signum, group)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        while True:
            try:
                rc = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:  # a server that ignores the stop for GRACE_S is killed
                if stop_asked and time.monotonic() - stop_asked[0] > GRACE_S:
                    _signal_group(proc, getattr(signal, "SIGKILL", signal.SIGTERM), group)
            except KeyboardInterrupt:  # where the handler could not be set (Windows): stop the server too
                stop_asked.append(time.monotonic())
                _signal_group(proc, signal.SIGINT, group)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _signal_group(proc, signal.SIGTERM, group)  # workers the server left behind
    return 0 if stop_asked and rc < 0 else rc  # stopped on request, however it ended


def _signal_group(proc: subprocess.Popen, signum: int, group: bool) -> None:
    try:
        if group:
            os.killpg(proc.pid, signum)
        elif proc.poll() is None:
            proc.send_signal(signum)
    except (ProcessLookupError, PermissionError):
        pass  # already gone
