"""Imports without the cyclic garbage collector's passes over the freshly imported modules.

Importing the CLI and the analysis stack (typer, pandas, pyarrow, numpy) makes almost no cyclic
garbage (860 objects in a whole 8-rank `analyze`, all of it during imports), yet the collector runs
about 190 times meanwhile, once over everything: 20-30 ms of the serial start before the per-rank
workers fork. `imports_without_gc` turns it off for the imports, then freezes what exists
(`gc.freeze`: never traversed again, so later passes stay short, and forked workers do not write
to, and so copy, the pages of those objects).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


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
