"""What the `coalesce` fix's model (graph.coalesce) reads off a rank's trace beside its timings: each GPU
activity's message size and the rank's GPU link peak per direction (crossrank.link_peaks)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzers.crossrank.link_peaks import dtype_bytes, link_peak_gbps


def message_bytes(gpu: pd.DataFrame) -> np.ndarray:
    """Per row: the profiler's "In msg nelems" × its dtype's element size; -1 where either is unknown."""
    if not len(gpu) or "msg_nelems" not in gpu or "dtype" not in gpu:
        return np.full(len(gpu), -1, dtype=np.int64)
    codes, uniques = pd.factorize(gpu["dtype"].astype(object).fillna("").to_numpy(dtype=object))
    size = np.asarray([dtype_bytes(u) or -1 for u in uniques], dtype=np.int64)[codes] if len(uniques) else \
        np.full(len(gpu), -1, dtype=np.int64)
    size = np.where(codes >= 0, size, -1)
    n = gpu["msg_nelems"].to_numpy(np.int64)
    return np.where((n >= 0) & (size > 0), n * size, -1).astype(np.int64)


def rank_link_gbps(devices: dict[int, str]) -> float:
    """The slowest per-direction link peak (GB/s) of the rank's GPUs whose model is known; 0.0 when none is."""
    known = [p[0] for name in devices.values() if (p := link_peak_gbps(str(name))) is not None]
    return float(min(known)) if known else 0.0
