"""One rank's rows of the collectives table (analyzers/crossrank/collective_table.py), and the names they carry:
the operation and library of a communication activity, its message size and size bucket. Every string column is
worked out once per distinct value (names by name id, the operation per name and collective, sizes per
distinct size), never per row."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from analyzers.crossrank.link_peaks import bus_factor, dtype_bytes
from analyzers.crossrank.peer_wait import _covered, _covered_before
from analyzers.timeline import intervals as iv
from analyzers.timeline.kernel_names import normalize_kernel_name
from analyzers.timeline.model import RankTrace

# Operation of a communication kernel whose name carries no NCCL collective: first match wins.
_OPS: tuple[tuple[str, str], ...] = (
    (r"^Memcpy PtoP", "PeerCopy"),
    (r"(?i)(?:^|::|\s)(?:\w*_)?(?:deep_?)?ep::(?:\w+::)*\w*dispatch|EpDispatch", "EpDispatch"),
    (r"(?i)(?:^|::|\s)(?:\w*_)?(?:deep_?)?ep::(?:\w+::)*\w*combine|EpCombine", "EpCombine"),
    (r"(?i)all_?reduce|cross_device_reduce|ar_fusion|rdxn", "AllReduce"),
    (r"(?i)reduce_?scatter", "ReduceScatter"),
    (r"(?i)all_?gather|fcollect", "AllGather"),
    (r"(?i)all_?to_?all", "AllToAll"),
    (r"(?i)broadcast", "Broadcast"),
    (r"(?i)barrier|sync_all|notify", "Barrier"),
)
# Which library a communication kernel comes from (for the table; classification is the rules').
_LIBRARIES: tuple[tuple[str, str], ...] = (
    (r"^Memcpy PtoP", "peer copy"),
    (r"(?i)^(?:void\s+)?rccl|ncclKernel|ncclDevKernel|^(?:void\s+)?nccl", "NCCL/RCCL"),
    (r"(?<![\w])(?:deep_ep|dpsk::ep|uccl)::|\bEp(?:Dispatch|Combine)", "DeepEP"),
    (r"tensorrt_llm::|\bar_fusion::|allreduce_fusion_kernel", "TensorRT-LLM"),
    (r"cross_device_reduce|(?i:custom_all_?reduce)", "custom all-reduce"),
    (r"(?<![\w])nvshmem|_on_stream_kernel", "NVSHMEM"),
    (r"symmetric_memory|symm_mem|multimem|one_shot_all_reduce|two_shot_all_reduce", "symmetric memory"),
    (r"(?<![\w])oneccl_|allreduce_execution_", "oneCCL"),
    (r"^(?:void )?mscclpp::", "MSCCL++"),
)


@lru_cache(maxsize=4096)
def comm_op(name: str, coll_name: str = "") -> str:
    """The operation of a communication activity: its NCCL collective, else from its name."""
    if coll_name:
        return coll_name
    for pattern, op in _OPS:
        if re.search(pattern, name):
            return op
    return "Other"


@lru_cache(maxsize=4096)
def comm_library(name: str) -> str:
    """The library a communication kernel comes from ("other" when none is recognised)."""
    for pattern, lib in _LIBRARIES:
        if re.search(pattern, name):
            return lib
    return "other"


def size_bucket(nbytes: float) -> str:
    """Power-of-two bucket of a message size ("1-2 MiB"); "unknown" without a size."""
    if not np.isfinite(nbytes) or nbytes <= 0:
        return "unknown"
    lo = 2 ** int(np.floor(np.log2(nbytes)))
    return f"{_bytes(lo)}-{_bytes(2 * lo)}"


def bucket_floor(label: str) -> float:
    """The lower bound of a size_bucket label in bytes, for sorting (-1 for "unknown")."""
    m = re.match(r"(\d+) (B|KiB|MiB|GiB|TiB)-", label)
    if not m:
        return -1.0
    return float(m.group(1)) * 1024 ** ("B", "KiB", "MiB", "GiB", "TiB").index(m.group(2))


def _bytes(n: int) -> str:
    for i, unit in enumerate(("B", "KiB", "MiB", "GiB", "TiB")):
        if n < 1024 ** (i + 1) or unit == "TiB":
            return f"{n // 1024 ** i} {unit}"
    return f"{n} B"


def rank_rows(t: RankTrace, waits: pd.Series | None, overlapped_min_share: float) -> pd.DataFrame:
    """A rank's rows. Every string column is worked out once per distinct value (names by name id, the
    operation per name and collective, sizes per distinct size), never per row."""
    gpu = t.gpu
    sel = np.flatnonzero((gpu["category"] == "comm").to_numpy(dtype=bool) & (gpu["kind"] != "memset").to_numpy())
    if not sel.size:
        return pd.DataFrame()
    g = gpu.iloc[sel]
    name_code, name_ids = pd.factorize(g["name_id"].to_numpy(np.int64))
    raw = t.names_of(name_ids)  # the distinct names
    coll_code, coll = _str_codes(g["coll_name"])
    s, e = g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64)
    dur = np.maximum(e - s, 0)
    wait_known = np.zeros(sel.size, dtype=bool)
    wait = np.zeros(sel.size, dtype=np.int64)
    if waits is not None and len(waits):
        w = waits.reindex(sel)
        wait_known = w.notna().to_numpy()
        wait = np.clip(np.nan_to_num(w.to_numpy(dtype=float)).astype(np.int64), 0, dur)
    transfer = dur - wait
    op_code, ops = _per_pair(name_code, coll_code, lambda a, b: comm_op(str(raw[a]), coll[b]))
    op = ops[op_code]
    nbytes = _message_bytes(g)
    n = g["group_size"].to_numpy(np.int64) if "group_size" in g else np.full(sel.size, -1, np.int64)
    n_code, n_values = pd.factorize(n)
    factor = _per_pair(op_code, n_code, lambda a, b: _factor(ops[a], int(n_values[b])))
    factor = factor[1][factor[0]].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where((nbytes > 0) & (transfer > 0), nbytes / np.maximum(transfer, 1), np.nan)  # bytes/ns = GB/s
    comp = (gpu["category"] == "compute").to_numpy(dtype=bool)
    busy = _covered_before(iv.union(gpu["start_ns"].to_numpy()[comp], gpu["end_ns"].to_numpy()[comp]))
    t0 = s + wait
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(transfer > 0, (_covered(busy, e) - _covered(busy, t0)) / np.maximum(transfer, 1), np.nan)
    pg_code, pgs = _str_codes(g["pg"])
    size_code, sizes = pd.factorize(nbytes)
    return pd.DataFrame({
        "rank": np.full(sel.size, t.rank, dtype=np.int64), "row": sel.astype(np.int64), "start_ns": s, "end_ns": e,
        "stream": g["stream"].to_numpy(np.int64),
        "name": _each(raw, normalize_kernel_name)[name_code],
        "library": _each(raw, comm_library)[name_code], "op": op,
        "pg": _each(pgs, str)[pg_code], "group_size": n, "dtype": g["dtype"].to_numpy(dtype=object),
        "bytes": nbytes, "dur_ns": dur, "wait_ns": np.where(wait_known, wait, np.nan), "transfer_ns": transfer,
        "wait_known": wait_known, "algbw_gbps": algbw, "busbw_gbps": algbw * factor, "overlap_share": share,
        "overlapped": np.nan_to_num(share) >= overlapped_min_share,
        "size_bucket": _each(sizes, lambda b: size_bucket(float(b)))[size_code],
    })


def _str_codes(col: pd.Series) -> tuple[np.ndarray, list[str]]:
    """(code per row, str of each distinct value): what ``col.to_numpy(dtype=object).astype(str)`` holds, as
    codes (a missing value reads "nan", or "None", as there)."""
    values = col.array
    if isinstance(values, pd.Categorical):
        codes = values.codes.astype(np.int64)
        uniques = [str(v) for v in values.categories.to_numpy(dtype=object)]
        if (codes < 0).any():
            codes = np.where(codes < 0, len(uniques), codes)
            uniques.append(str(np.nan))
        return codes, uniques
    codes, distinct = pd.factorize(col.to_numpy(dtype=object), use_na_sentinel=False)
    return codes.astype(np.int64), [str(v) for v in distinct]


def _per_pair(a: np.ndarray, b: np.ndarray, fn: Callable[[int, int], Any]) -> tuple[np.ndarray, np.ndarray]:
    """(code per row, fn of each distinct (a, b) pair of codes as an object array)."""
    width = int(b.max()) + 1 if len(b) else 1  # both are codes (>= 0): one int64 key per pair
    code, keys = pd.factorize(a * width + b)
    return code, _each(keys.tolist(), lambda k: fn(*divmod(k, width)))


def _factor(op: str, n: int) -> float:
    f = bus_factor(op, n if n > 0 else None)
    return np.nan if f is None else f


def _each(values: Any, fn: Callable[[Any], Any]) -> np.ndarray:
    """fn of each value, as an object array (values: the distinct ones)."""
    out = np.empty(len(values), dtype=object)
    out[:] = [fn(v) for v in values]
    return out


def _message_bytes(g: pd.DataFrame) -> np.ndarray:
    """S of NCCL's formulas per row: the larger of in and out messages × element size (the whole
    buffer: all-gather's output, reduce-scatter's input); a copy's own bytes; 0 when unknown."""
    code, dtypes = _str_codes(g["dtype"])
    size = np.array([dtype_bytes(d) or 0 for d in dtypes], dtype=np.int64)[code] if len(code) else \
        np.zeros(0, dtype=np.int64)
    n_in = g["msg_nelems"].to_numpy(np.int64)
    n_out = g["out_nelems"].to_numpy(np.int64) if "out_nelems" in g else np.full(len(g), -1, np.int64)
    msg = np.maximum(np.maximum(n_in, n_out), 0) * size
    copy = (g["kind"] == "memcpy").to_numpy(dtype=bool)
    return np.where(copy, np.maximum(g["bytes"].to_numpy(np.int64), 0), msg).astype(np.int64)
