"""Importing the CLI and the analysis stack cheaply: what the imports cost beyond loading code.

Without the cyclic GC's passes: importing the CLI and the analysis stack (typer, pandas, pyarrow,
numpy) makes almost no cyclic garbage (860 objects in a whole 8-rank `analyze`, all of it during
imports), yet the collector runs about 190 times meanwhile, once over everything: 20-30 ms of the
serial start before the per-rank workers fork. `imports_without_gc` turns it off for the imports,
then freezes what exists (`gc.freeze`: never traversed again, so later passes stay short, and
forked workers do not write to, and so copy, the pages of those objects).

Without OpenBLAS's server threads: numpy's OpenBLAS starts one thread per further core when numpy
is imported, and each spins about 0.1 s of CPU waiting for work that never comes (nothing in the
analyzers calls BLAS). `analysis_stack_imports` has numpy load it single-threaded (perf on an 8-rank
`analyze`: 3 % of the run's CPU in blas_thread_server; -4 % CPU, -0.9 % wall without it,
benchmarks/RESULTS.md). A setting the user made (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS) is kept,
and the environment is restored after the import, so processes started later (the runners of
`overlapscope run`) get the user's.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

BLAS_THREAD_SETTINGS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")


@contextmanager
def imports_without_gc() -> Iterator[None]:
    """Import with the cyclic GC off; afterwards, freeze every object there is and restore the GC."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


@contextmanager
def single_thread_blas() -> Iterator[None]:
    """numpy, if imported meanwhile, loads OpenBLAS without server threads (unless the user said how
    many); the environment is as it was afterwards."""
    pinned = "numpy" not in sys.modules and not any(name in os.environ for name in BLAS_THREAD_SETTINGS)
    if pinned:
        os.environ[BLAS_THREAD_SETTINGS[0]] = "1"
    try:
        yield
    finally:
        if pinned:
            os.environ.pop(BLAS_THREAD_SETTINGS[0], None)


@contextmanager
def analysis_stack_imports() -> Iterator[None]:
    """Where a command first imports the analysis stack (pandas, numpy, pyarrow): both of the above."""
    with imports_without_gc(), single_thread_blas():
        yield
