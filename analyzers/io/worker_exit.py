"""Pool workers end with the process that started them.

A `kill -9` of `overlapscope analyze` gives its pool no chance to stop its workers: they went on with
their file (or sat blocked on the pool's queues) with no one to read their results, holding memory and
CPU. Each worker therefore asks the kernel to kill it when its parent dies (Linux's PR_SET_PDEATHSIG,
through ctypes), and, where there is no such call (macOS) or the parent died before the call was made,
a daemon thread checks every WATCH_SECONDS that its parent is still the one that started it and
exits at once when it is not.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # linux/prctl.h
WATCH_SECONDS = 0.5


def die_with_parent(parent_pid: int) -> None:
    """Call first thing in a pool worker: the kernel kills it with its parent; a watchdog covers the rest."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # no C library to ask: the watchdog alone
            pass
    if os.getppid() != parent_pid:  # the parent died before the call: nothing would ever kill this worker
        os._exit(1)
    threading.Thread(target=_watch, args=(parent_pid,), name="overlapscope-parent-watch", daemon=True).start()


def _watch(parent_pid: int) -> None:
    while True:
        time.sleep(WATCH_SECONDS)
        if os.getppid() != parent_pid:
            os._exit(1)
