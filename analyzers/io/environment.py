"""What the environment configures: the cache folder and the Dask scheduler.

Light to import (no pandas), because `--help` and a report-cache hit must not pay for the
analysis stack.
"""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_cache_dir

ENV_CACHE_DIR = "OVERLAPSCOPE_CACHE_DIR"
ENV_SCHEDULER = "OVERLAPSCOPE_SCHEDULER"


def cache_base() -> Path:
    """``$OVERLAPSCOPE_CACHE_DIR`` if set, else the platform's user cache folder for overlapscope."""
    override = os.environ.get(ENV_CACHE_DIR)
    return Path(override) if override else Path(user_cache_dir("overlapscope"))


def scheduler_from_env(value: str | None) -> str | None:
    """--scheduler wins; else $OVERLAPSCOPE_SCHEDULER; empty means local."""
    return value or os.environ.get(ENV_SCHEDULER) or None
