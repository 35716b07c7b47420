"""torchrun's ranks forked from the test process, which imported torch once, instead of started afresh.

Why: each torchrun launch on the 2-core machine spends seconds importing torch three times (torchrun, then every
rank) before a rank does its few milliseconds of work, and the correctness tests of the runners launch twenty times.
`forked_ranks` (a fixture) replaces runners.launch's `execute` for one test: the command launch built is taken
apart (--nproc-per-node, -m runners.X ARGS), each rank is a fork of this process running runners.X as __main__ with
the variables torchrun sets, and this process serves the rendezvous store as torchrun's agent does. Everything else
(the command and its manifest, the ranks' outputs, read_result, the analysis) is the real code's.

What only the real launcher shows stays on it: a failed, hung, killed or aborted rank and a wrong answer (how
torchrun reports them), the launcher's own log and progress pump, and whole successful runs through torchrun
(test_runners' profiler run, test_cli_run's first run with its traces analyzed, the app's Run button).
"""

from __future__ import annotations

import contextlib
import os
import runpy
import socket
import sys
import time
import traceback
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from runners import launch
from runners.procs import PREFIX, REPO_ROOT, ProgressFn


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(module: str, args: list[str], env: dict[str, str], log: Path) -> None:
    """In the forked child: run the rank's module as torchrun would, then leave without the test process's exit."""
    code = 1
    try:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - the rank's own streams
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        os.environ.clear()
        os.environ.update(env)
        import torch  # imported before the fork: its thread count is set here, as torchrun's variable would have

        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
        os.chdir(REPO_ROOT)
        sys.argv = [module, *args]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - a rank's error goes to its log, as under torchrun
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def execute(cmd: list[str], out: Path, timeout_s: float, on_progress: ProgressFn | None,
            env: dict[str, str]) -> tuple[int | None, Path, float]:
    """runners.procs.execute's contract: (exit code or None on timeout, log path, wall seconds)."""
    import torch.distributed as dist

    assert cmd[1:3] == ["-m", "torch.distributed.run"], cmd
    nproc = int(cmd[cmd.index("--nproc-per-node") + 1])
    at = cmd.index("-m", 3)
    module, args = cmd[at + 1], cmd[at + 2:]
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "launch.log"
    log_path.write_text("$ " + " ".join(cmd) + "\n")
    port = _free_port()
    t0 = time.monotonic()
    pids = []
    for rank in range(nproc):
        rank_env = {**env, "RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
                    "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc), "ROLE_WORLD_SIZE": str(nproc),
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TORCHELASTIC_USE_AGENT_STORE": "True",
                    "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1")}  # torchrun's default for several ranks
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _rank(module, args, rank_env, log_path)
        pids.append(pid)
    # the agent's store, made after the forks (its server thread is not copied into a rank): the ranks' clients
    # retry until it listens, and it outlives every rank's sockets as torchrun's does
    store = dist.TCPStore("127.0.0.1", port, nproc, is_master=True, timeout=timedelta(seconds=timeout_s),
                          wait_for_workers=False)
    codes: dict[int, int] = {}
    deadline = t0 + timeout_s
    while len(codes) < nproc and time.monotonic() < deadline:
        for pid in pids:
            if pid not in codes:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[pid] = os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    rc: int | None = next((c for c in codes.values() if c != 0), 0)
    if len(codes) < nproc:
        rc = None
        for pid in set(pids) - set(codes):
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    del store
    if on_progress is not None:
        for line in log_path.read_text(errors="replace").splitlines():
            if PREFIX in line:
                on_progress(line[line.index(PREFIX) + len(PREFIX):].strip())
    return (1 if rc else rc), log_path, time.monotonic() - t0


@contextlib.contextmanager
def ranks_forked() -> Iterator[None]:
    """runners.launch starts its ranks as forks of this process (above) inside the with block."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(launch, "execute", execute)
        yield


@pytest.fixture()
def forked_ranks() -> Iterator[None]:
    """ranks_forked() for the whole test that asks for this fixture."""
    with ranks_forked():
        yield
