"""A GPU table's columns as plain arrays, read once and shared by every measurement of a rank.

Selecting DataFrame columns, or rows of a frame that carries Arrow string columns, costs far more
than the interval arithmetic itself; the metrics and detectors read these arrays instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


def category_is(gpu: pd.DataFrame, value: str) -> np.ndarray:
    """gpu["category"] == value per row, on the categorical's codes when it is one."""
    cat = gpu["category"]
    if isinstance(cat.dtype, pd.CategoricalDtype):
        cats = cat.cat.categories
        if value not in cats:
            return np.zeros(len(gpu), dtype=bool)
        return cat.cat.codes.to_numpy() == cats.get_loc(value)
    return cat.to_numpy() == value


@dataclass
class GpuRows:
    """start/end (int64), stream, device and the comm / compute masks of GPU rows."""

    s: np.ndarray
    e: np.ndarray
    stream: np.ndarray
    device: np.ndarray
    comm: np.ndarray
    compute: np.ndarray

    @classmethod
    def of(cls, gpu: pd.DataFrame) -> GpuRows:
        return cls(gpu["start_ns"].to_numpy(dtype=np.int64), gpu["end_ns"].to_numpy(dtype=np.int64),
                   gpu["stream"].to_numpy(), gpu["device"].to_numpy(),
                   category_is(gpu, "comm"), category_is(gpu, "compute"))

    def take(self, rows: np.ndarray | slice) -> GpuRows:
        return GpuRows(self.s[rows], self.e[rows], self.stream[rows], self.device[rows], self.comm[rows],
                       self.compute[rows])

    def __len__(self) -> int:
        return int(self.s.size)
