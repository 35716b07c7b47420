"""A kernel's name without argument list or template arguments: one key per kind of kernel.

Its own light module (no pandas): the cross-rank matching keys kernels by it, and the CLI's
renderers show it from a cached report without loading the analysis stack.
"""

from __future__ import annotations

import re

_NAME_CUT = re.compile(r"[(<]")


def normalized_name(name: str) -> str:
    """Kernel name without argument list or template arguments: one key per kind of kernel."""
    head = _NAME_CUT.split(name, maxsplit=1)[0].strip()
    return head.removeprefix("void ").strip() or name
