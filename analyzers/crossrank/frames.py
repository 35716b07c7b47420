"""Each rank's GPU rows as arrays the cross-rank steps share; kernel-name normalization.

The cross-rank stage runs once, in the parent process, after every rank is loaded, so it
touches each rank's table once here (a handful of O(rows) numpy / factorize passes) and the
later steps work on these arrays, never on string-keyed groupbys over events.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analyzers.timeline.model import RankTrace, TraceSet
from analyzers.timeline.short_names import normalized_name
from analyzers.timeline.user_regex import search_each


def _normalized(names: np.ndarray) -> np.ndarray:
    codes, uniques = pd.factorize(pd.Series(names, dtype=object), use_na_sentinel=False)
    return np.array([normalized_name(str(u)) for u in uniques], dtype=object)[codes] if len(names) else names


_PACK_LIMIT = 2 ** 62  # packed keys stay below this (int64 with room to spare)


def _ranges(tables: list[list[np.ndarray]]) -> tuple[list[int], list[int]]:
    """Per column the lowest value and the span over all tables (tables: lists of aligned columns)."""
    lows, spans = [], []
    for i in range(len(tables[0])):
        present = [t[i] for t in tables if len(t[i])]
        lo = min((int(c.min()) for c in present), default=0)
        lows.append(lo)
        spans.append(max((int(c.max()) for c in present), default=0) - lo + 1)
    return lows, spans


def _pack(cols: list[np.ndarray], lows: list[int], spans: list[int]) -> np.ndarray | None:
    """The columns as one int64 per row in mixed radix (order-preserving); None when it would overflow."""
    if math.prod(spans) >= _PACK_LIMIT:
        return None
    out = np.zeros(len(cols[0]), dtype=np.int64)
    for c, lo, span in zip(cols, lows, spans, strict=True):
        out = out * span + (c - lo)
    return out


def _search(values: pd.Series, pattern: str) -> np.ndarray:
    """bool(re.search(pattern, str(value))) for each value, the regex run once per distinct value."""
    codes, uniq = pd.factorize(values.array, use_na_sentinel=False)
    return search_each(pattern, [str(u) for u in uniq], "a collective name pattern")[codes] if len(codes) else \
        np.zeros(0, dtype=bool)


def _codes(*cols: np.ndarray) -> tuple[np.ndarray, int]:
    """One code per distinct tuple of the (integer) columns, numbered in order of first appearance."""
    packed = _pack(list(cols), *_ranges([list(cols)])) if len(cols[0]) else None
    if packed is not None:
        codes, uniq = pd.factorize(packed)
        return codes.astype(np.int64), len(uniq)
    out, n = np.zeros(len(cols[0]), dtype=np.int64), 1
    for c in cols:
        codes, uniq = pd.factorize(c)
        out, pairs = pd.factorize(out * max(len(uniq), 1) + codes)
        n = len(pairs)
    return out.astype(np.int64), n


def _runs(*keys: np.ndarray) -> np.ndarray:
    """Position of each row within its run of equal keys (rows sorted so that equal keys are adjacent)."""
    n = len(keys[0])
    new = np.ones(n, dtype=bool)
    for k in keys:
        new[1:] &= k[1:] == k[:-1]
    new[1:] = ~new[1:]
    idx = np.arange(n)
    return idx - np.maximum.accumulate(np.where(new, idx, 0))


def _slices(keys: np.ndarray) -> dict[int, slice]:
    """Slice of each key's run in an array sorted by key."""
    if not len(keys):
        return {}
    heads = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    ends = np.r_[heads[1:], len(keys)]
    return {int(keys[h]): slice(int(h), int(e)) for h, e in zip(heads, ends, strict=True)}


class _RankRows:
    """One rank's GPU rows (position = row of its gpu table) and its streams.

    What is per row (start, end, stream, gname, comm, role) is read from the rank's table when asked
    for, not held: the stage keeps every rank's frame at once, and at many ranks the row arrays of all
    of them would be most of the caller's memory (analyzers/timeline/packed.py keeps the tables small).
    Held: the stream code of each row (the smallest integer type), the per-stream and per-name summaries.
    """

    def __init__(self, trace: RankTrace, scode: np.ndarray, streams: pd.DataFrame) -> None:
        self.trace = trace
        self._scode = scode.astype(np.min_scalar_type(max(len(streams) - 1, 0)))
        # Per (device, stream), sorted by both: device, stream, n (kernels), first (earliest start),
        # appear (order of first appearance); match_stream_roles adds role and similarity.
        self.streams = streams
        self.name_ids = np.zeros(0, dtype=np.int64)  # sorted distinct gname values of this rank
        self.counts = np.zeros((len(streams), 0), dtype=np.int64)  # streams × name_ids matrix of kernel counts
        self.local_ids = np.zeros(0, dtype=np.int64)  # the rank's distinct name_id values, sorted
        self.local_to_global = np.zeros(0, dtype=np.int64)  # gname of each of them
        self.stream_role: np.ndarray | None = None  # int64 per stream, set by _attach_roles
        self.n = len(scode)

    @property
    def start(self) -> np.ndarray:  # int64
        return self.trace.gpu["start_ns"].to_numpy(dtype=np.int64)

    @property
    def end(self) -> np.ndarray:  # int64
        return self.trace.gpu["end_ns"].to_numpy(dtype=np.int64)

    @property
    def stream(self) -> np.ndarray:
        return self.trace.gpu["stream"].to_numpy()

    @property
    def gname(self) -> np.ndarray:
        """int64 per row, index into _Frames.names (one id per distinct name over all ranks)."""
        ids = self.trace.gpu["name_id"].to_numpy()
        return self.local_to_global[np.searchsorted(self.local_ids, ids)] if len(ids) else \
            np.zeros(0, dtype=np.int64)

    @property
    def comm(self) -> np.ndarray:  # bool
        return (self.trace.gpu["category"] == "comm").to_numpy(dtype=bool)

    @property
    def scode(self) -> np.ndarray:
        """int64 per row, index into streams."""
        return self._scode.astype(np.int64)

    @property
    def role(self) -> np.ndarray | None:
        """int64 per row: its stream's role (None until _attach_roles)."""
        return None if self.stream_role is None else self.stream_role[self._scode]

    def __len__(self) -> int:
        return self.n


@dataclass
class _Frames:
    """Per-rank rows with names made comparable across ranks."""

    ranks: list[int]
    ref: int
    by_rank: dict[int, _RankRows]
    names: np.ndarray  # gname -> kernel name (object array)
    comm: Any = None  # matching._CommRows: the communication rows, once match_collectives built them


def _stream_codes(device: np.ndarray, stream: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, pd.DataFrame]:
    """Per row the index of its (device, stream) in the sorted stream list, and that list."""
    d_codes, d_uniq = pd.factorize(device)
    s_codes, s_uniq = pd.factorize(stream)
    pair_codes, pairs = pd.factorize(d_codes.astype(np.int64) * max(len(s_uniq), 1) + s_codes)
    dev = np.asarray(d_uniq, dtype=device.dtype)[pairs // max(len(s_uniq), 1)]
    st = np.asarray(s_uniq, dtype=stream.dtype)[pairs % max(len(s_uniq), 1)]
    order = np.lexsort((st, dev))
    pos = np.empty(len(order), dtype=np.int64)
    pos[order] = np.arange(len(order))
    scode = pos[pair_codes]
    first = np.full(len(order), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, scode, start)
    appear = np.empty(len(order), dtype=np.int64)
    appear[np.argsort(first, kind="stable")] = np.arange(len(order))
    streams = pd.DataFrame({"device": dev[order], "stream": st[order],
                            "n": np.bincount(scode, minlength=len(order)).astype(np.int64),
                            "first": first, "appear": appear})
    return scode, streams


def _rank_rows(t: RankTrace) -> tuple[_RankRows, np.ndarray, np.ndarray, np.ndarray]:
    """The rank's rows, its distinct name ids in first-appearance order, their names, and each row's
    code into them (local: made global by _build_frames)."""
    g = t.gpu
    local, ids = pd.factorize(g["name_id"].to_numpy())
    scode, streams = _stream_codes(g["device"].to_numpy(), g["stream"].to_numpy(),
                                   g["start_ns"].to_numpy(dtype=np.int64))
    return _RankRows(t, scode, streams), np.asarray(ids), t.names_of(ids), local.astype(np.int64)


def _build_frames(traces: TraceSet) -> _Frames:
    ranks = traces.rank_ids()
    parts = []
    for r in ranks:  # one rank's table at a time: the per-row codes are dropped once counted
        rows, ids, names, local = _rank_rows(traces.ranks[r])
        n_s = len(rows.streams)
        parts.append((rows, ids, names, np.bincount(rows.scode * max(len(ids), 1) + local,
                                                    minlength=n_s * len(ids)).reshape(n_s, len(ids))))
    all_names = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, dtype=object)
    # The distinct names of each rank in first-appearance order, concatenated: factorizing them
    # numbers the names exactly as factorizing every row of every rank would, at a fraction of the cost.
    codes, uniques = pd.factorize(pd.Series(all_names, dtype=object), use_na_sentinel=False)
    bounds = np.cumsum([0] + [len(p[2]) for p in parts])
    by_rank = {}
    for i, r in enumerate(ranks):
        rows, ids, _, local_counts = parts[i]
        to_global = codes[bounds[i]:bounds[i + 1]].astype(np.int64)
        rows.name_ids, to_col = np.unique(to_global, return_inverse=True)
        # local_counts' columns are the local codes (first-appearance order); counts' are name_ids'
        counts = np.zeros((len(rows.streams), len(rows.name_ids)), dtype=np.int64)
        np.add.at(counts.T, to_col, local_counts.T.astype(np.int64))
        rows.counts = counts
        o = np.argsort(ids, kind="stable")
        rows.local_ids, rows.local_to_global = ids[o], to_global[o]
        by_rank[r] = rows
    return _Frames(ranks=ranks, ref=ranks[0], by_rank=by_rank, names=np.asarray(uniques, dtype=object))
