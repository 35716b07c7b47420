"""Each rank's communication and kernel rows in the shape the cross-rank steps share; kernel-name normalization."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzers.timeline.model import TraceSet

_NAME_CUT = re.compile(r"[(<]")


def normalized_name(name: str) -> str:
    """Kernel name without argument list or template arguments: one key per kind of kernel."""
    head = _NAME_CUT.split(name, maxsplit=1)[0].strip()
    return head.removeprefix("void ").strip() or name


def _normalized(names: np.ndarray) -> np.ndarray:
    codes, uniques = pd.factorize(pd.Series(names, dtype=object), use_na_sentinel=False)
    return np.array([normalized_name(str(u)) for u in uniques], dtype=object)[codes] if len(names) else names


@dataclass
class _Frames:
    """Per-rank event frames with names made comparable across ranks."""

    ranks: list[int]
    ref: int
    by_rank: dict[int, pd.DataFrame]  # row, start, end, device, stream, gname, comm (+ role)
    names: np.ndarray  # gname -> kernel name (object array)


def _build_frames(traces: TraceSet) -> _Frames:
    ranks = traces.rank_ids()
    parts, names = [], []
    for r in ranks:
        t = traces.ranks[r]
        g = t.gpu
        names.append(t.names_of(g["name_id"].to_numpy()))
        parts.append(pd.DataFrame({
            "row": np.arange(len(g), dtype=np.int64),
            "start": g["start_ns"].to_numpy(dtype=np.int64),
            "end": g["end_ns"].to_numpy(dtype=np.int64),
            "device": g["device"].to_numpy(),
            "stream": g["stream"].to_numpy(),
            "comm": (g["category"] == "comm").to_numpy(dtype=bool),
        }))
    all_names = np.concatenate(names) if names else np.zeros(0, dtype=object)
    codes, uniques = pd.factorize(pd.Series(all_names, dtype=object), use_na_sentinel=False)
    bounds = np.cumsum([0] + [len(p) for p in parts])
    by_rank = {}
    for i, r in enumerate(ranks):
        df = parts[i]
        df["gname"] = codes[bounds[i]:bounds[i + 1]].astype(np.int64)
        by_rank[r] = df
    return _Frames(ranks=ranks, ref=ranks[0], by_rank=by_rank, names=np.asarray(uniques, dtype=object))
