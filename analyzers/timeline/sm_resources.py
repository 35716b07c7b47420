"""What a kernel holds on each SM, and what an SM has: the facts that say whether two kernels can run
side by side.

Both trace formats record a kernel's grid, block, registers per thread and shared memory per block,
and each GPU's per-SM limits (Kineto ``deviceProperties``, nsys ``TARGET_INFO_GPU``). A kernel whose
blocks are resident on every SM and leave too few registers, threads or shared memory for one block of
another kernel keeps that kernel off the GPU until its own blocks retire (analyzers.graph.residency).
The loaders put the per-kernel figures in the ``gpu`` table (``blocks``, ``threads``, ``regs``,
``smem``; -1 unknown) and the limits in ``RankTrace.meta["sm_limits"]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from analyzers.timeline.model import RankTrace

LIMIT_KEYS = ("sms", "regs", "smem", "threads", "blocks")
# resident blocks per SM where the trace does not say (Kineto): the limit of every architecture from
# sm_50 to sm_90 but sm_86/sm_89 (16, 24); only kernels of many small blocks reach it
DEFAULT_MAX_BLOCKS_PER_SM = 32
META_KEY = "sm_limits"
# columns of a rank's resource table: the device and its per-SM limits, then the kernel's figures
RES_COLUMNS = ("device", "sms", "regs", "smem", "threads", "max_blocks", "blocks", "block_threads",
               "thread_regs", "block_smem")


def _positive_int(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v <= 0 or v >= 2**40:
        return None
    return int(v)


def dims_product(values: Sequence[Any]) -> np.ndarray:
    """[x, y, z] lists (Kineto's grid / block) -> their product; anything else -1."""
    seen: dict[tuple, int] = {}

    def one(v: Any) -> int:
        if not isinstance(v, list) or not v or len(v) > 3:
            return -1
        key = tuple(v)
        got = seen.get(key)
        if got is None:
            dims = [_positive_int(x) for x in v]
            got = -1 if any(d is None for d in dims) else int(np.prod(dims))
            seen[key] = got
        return got

    return np.fromiter(map(one, values), dtype=np.int64, count=len(values))


def device_limits(sms: Any, regs: Any, smem: Any, threads: Any, blocks: Any = None) -> dict[str, int] | None:
    """One GPU's per-SM limits, or None when one that matters is missing or not a positive number."""
    got = {"sms": _positive_int(sms), "regs": _positive_int(regs), "smem": _positive_int(smem),
           "threads": _positive_int(threads), "blocks": _positive_int(blocks) or DEFAULT_MAX_BLOCKS_PER_SM}
    if any(v is None for v in got.values()):
        return None
    return {k: int(v) for k, v in got.items() if v is not None}


def limits_of(meta: dict[str, Any]) -> dict[int, dict[str, int]]:
    """device id -> limits, from a RankTrace's meta (keys are strings there: it travels as JSON)."""
    raw = meta.get(META_KEY) or {}
    out = {}
    for k, v in raw.items():
        try:
            dev = int(k)
        except (TypeError, ValueError):
            continue
        if isinstance(v, dict) and all(isinstance(v.get(key), int) and v[key] > 0 for key in LIMIT_KEYS):
            out[dev] = {key: int(v[key]) for key in LIMIT_KEYS}
    return out


def kernel_resources(trace: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    """(per GPU row: index into the table, -1 unknown; the table of distinct rows, RES_COLUMNS)."""
    gpu = trace.gpu
    n = len(gpu)
    none = (np.full(n, -1, dtype=np.int32), np.zeros((0, len(RES_COLUMNS)), dtype=np.int64))
    limits = limits_of(trace.meta)
    if not n or not limits or "blocks" not in gpu:
        return none
    device = gpu["device"].to_numpy(np.int64)
    lim = np.full((n, 5), -1, dtype=np.int64)
    for dev, v in limits.items():
        lim[device == dev] = (v["sms"], v["regs"], v["smem"], v["threads"], v["blocks"])
    kern = np.stack([gpu[c].to_numpy(np.int64) for c in ("blocks", "threads", "regs", "smem")], axis=1)
    known = (gpu["kind"].to_numpy(dtype=object) == "kernel") & (lim[:, 0] > 0) & (kern[:, :2] > 0).all(axis=1) & (
        kern[:, 2:] >= 0).all(axis=1)
    if not known.any():
        return none
    rows = np.column_stack([device, lim, kern])[known]
    # the distinct rows in lexicographic order, as np.unique(rows, axis=0) gives them (its sort of 80-byte
    # records costs 10x this sort by columns)
    o = np.lexsort(rows.T[::-1])
    ro = rows[o]
    new = np.r_[True, (ro[1:] != ro[:-1]).any(axis=1)] if len(ro) else np.zeros(0, dtype=bool)
    inverse = np.empty(len(rows), dtype=np.int64)
    inverse[o] = np.cumsum(new) - 1
    res_id = np.full(n, -1, dtype=np.int32)
    res_id[known] = inverse
    return res_id, ro[new]
