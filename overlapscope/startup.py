"""The `overlapscope` command's entry point (console script and `python -m overlapscope`).

The CLI is imported with the cyclic GC off, then frozen (stack_imports.py says why); the
process ends through cli.exit_after_command, which skips the interpreter's teardown.
"""

from __future__ import annotations

from typing import NoReturn

from .stack_imports import imports_without_gc


def run() -> NoReturn:
    """Run the command line and exit with its code."""
    with imports_without_gc():
        from .cli import exit_after_command, main
    exit_after_command(main())
