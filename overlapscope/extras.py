"""Which optional extra a drawing command needs, asked before any work.

The base install (`pip install -e .`) analyzes, diffs, prices and exports Perfetto JSON without Plotly,
Streamlit or kaleido; those come with the `app` extra. A command that draws checks here first, so a
missing library is one line naming the extra to install (exit 2), never a traceback after the analysis.
"""

from __future__ import annotations

import importlib.util

from .common import UsageFailure

APP_EXTRA_INSTALL = "pip install -e '.[app]'"
FIGURES = ("plotly",)  # --html: the report's figures
IMAGES = ("plotly", "kaleido")  # --png / --svg: the figures drawn by kaleido
DASHBOARD = ("streamlit", "plotly")  # `overlapscope app`


def missing_modules(modules: tuple[str, ...]) -> list[str]:
    """The modules of `modules` this interpreter cannot import (found by name, without importing them)."""
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a finder that refuses the name; a module without a spec
            found = False
        if not found:
            missing.append(name)
    return missing


def require_app_extra(what: str, modules: tuple[str, ...]) -> None:
    """Raise a one-line UsageFailure (exit 2) naming the extra when any of `modules` is missing."""
    missing = missing_modules(modules)
    if missing:
        raise UsageFailure(f"{what} needs the app extra ({', '.join(missing)} not installed): {APP_EXTRA_INSTALL}")
