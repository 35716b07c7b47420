"""A running maximum within groups, in numpy: the graph's ordering keys and the replay's stream runs
need one over ~10^5 activities several times a run, where pandas' groupby costs a factorization each."""

from __future__ import annotations

import numpy as np
import pandas as pd

_ROOM = 1 << 62  # int64 room the shifted values must stay inside


def grouped_cummax(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """values (int64) laid out group after group; first marks each group's first element. Each element
    becomes the maximum of its group's elements up to it.

    Group g is shifted up by g times the values' range, so that one running maximum over the whole
    array never carries a value from one group into the next; exact integer arithmetic. Where the
    shifted values would not fit in int64 (a range near 2**62, as an unset time gives), pandas does it."""
    if not len(values):
        return values.copy()
    g = np.cumsum(first) - 1
    lo, hi = int(values.min()), int(values.max())
    span = hi - lo + 1
    if span * (int(g[-1]) + 1) >= _ROOM:
        return pd.Series(values).groupby(g).cummax().to_numpy()
    shift = g * span - lo
    return np.maximum.accumulate(values + shift) - shift
