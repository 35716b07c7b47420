"""Collective names derived from NCCL / RCCL kernel names, shared by the Kineto and nsys loaders.

Both trace formats carry the kernel name, so deriving the collective from it gives the same
``coll_name`` whichever profiler wrote the trace. Three naming generations are recognised:

- NCCL >= 2.19: ``ncclDevKernel_AllGather_RING_LL(...)``, ``ncclDevKernel_SendRecv(...)``
- NCCL 2.8 - 2.18: ``ncclKernel_AllReduce_RING_LL_Sum_float(...)``
- NCCL <= 2.7: ``ncclAllReduceRingLLKernel_sum_f32(...)``, ``ncclSendRecvKernel_copy_i8(...)``

Anything else (including NCCL's multi-operation ``ncclDevKernel_Generic``) gives "" (unknown).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

import numpy as np
import pandas as pd

# Canonical names, keyed by their lower-case spelling.
COLLECTIVES: dict[str, str] = {n.lower(): n for n in (
    "AllReduce", "AllGather", "ReduceScatter", "Reduce", "Broadcast", "SendRecv", "Send", "Recv",
    "AllToAll", "Gather", "Scatter",
)}

# ncclDevKernel_<Op>_... / ncclKernel_<Op>_... (also rccl), optionally after "void ".
_TOKEN_FORM = re.compile(r"^(?:void\s+)?[nr]ccl(?:Dev)?Kernel_([A-Za-z]+)")
# nccl<Op>[Ring|Tree|CollNet...]...Kernel (NCCL <= 2.7); longest op names first.
_OLD_FORM = re.compile(
    r"^(?:void\s+)?[nr]ccl(ReduceScatter|AllReduce|AllGather|AllToAll|Broadcast|SendRecv|Reduce|Send|Recv)"
    r"[A-Za-z0-9]*Kernel")


@lru_cache(maxsize=4096)
def collective_name_from_kernel(name: str) -> str:
    """'ncclDevKernel_AllGather_RING_LL(...)' -> 'AllGather'; '' when the name is no known collective."""
    m = _TOKEN_FORM.match(name)
    if m:
        return COLLECTIVES.get(m.group(1).lower(), "")
    m = _OLD_FORM.match(name)
    if m:
        return COLLECTIVES[m.group(1).lower()]
    return ""


def collective_names(names: Iterable[str] | np.ndarray) -> np.ndarray:
    """Vectorized form for a name column: the regexes run once per distinct name."""
    values = pd.Series(np.asarray(list(names) if not isinstance(names, np.ndarray) else names,
                                  dtype=object), dtype=object)
    if values.empty:
        return np.zeros(0, dtype=object)
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    mapped = np.array([collective_name_from_kernel(str(u)) for u in uniques], dtype=object)
    return mapped[codes]
