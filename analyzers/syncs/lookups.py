"""Vectorized lookups the sync and finding analyses share: per distinct name, by correlation id,
by a string column's value. Each one hashes or sorts its table once instead of per row."""

from __future__ import annotations

from collections.abc import Callable, Collection

import numpy as np
import pandas as pd

from analyzers.timeline.model import RankTrace


class PerName:
    """The distinct name ids of one id column (pd.factorize: a hash pass, no sort), so a function
    of the name runs once per distinct name and is broadcast back to the rows."""

    def __init__(self, trace: RankTrace, ids: np.ndarray) -> None:
        self.codes, uniq = pd.factorize(np.asarray(ids))
        self.names = [trace.name_of(int(u)) for u in uniq]

    def distinct(self, fn: Callable[[str], object], dtype: object = object) -> np.ndarray:
        """fn of each distinct name (index with .codes for the rows)."""
        out = np.empty(len(self.names), dtype=dtype)
        for i, n in enumerate(self.names):
            out[i] = fn(n)
        return out

    def rows(self, fn: Callable[[str], object], dtype: object = object) -> np.ndarray:
        """fn of each row's name, computed once per distinct name."""
        return self.distinct(fn, dtype)[self.codes]


def first_by_key(keys: np.ndarray, queries: np.ndarray, *, non_negative: bool = True) -> np.ndarray:
    """Per query, the row of the first key equal to it (-1 if none): what
    Series(index=keys)[~index.duplicated()].reindex(queries) picks, by one stable sort. With
    non_negative, negative keys (unknown correlation) match nothing."""
    keys = np.asarray(keys)
    queries = np.asarray(queries)
    rows = np.flatnonzero(keys >= 0) if non_negative else np.arange(keys.size)
    k = keys[rows]
    order = np.argsort(k, kind="stable")
    ks, rows = k[order], rows[order]
    pos = np.searchsorted(ks, queries, side="left")
    pos_c = np.clip(pos, 0, max(ks.size - 1, 0))
    hit = (pos < ks.size) & (ks[pos_c] == queries) if ks.size else np.zeros(queries.size, dtype=bool)
    return np.where(hit, rows[pos_c] if rows.size else -1, -1)


def as_float(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """values[rows] as float64 with NaN where rows is -1 (a pandas reindex's result)."""
    out = np.full(rows.size, np.nan)
    hit = rows >= 0
    out[hit] = values[rows[hit]]
    return out


class Distinct:
    """A column's distinct values (pd.factorize), so that a test of the value runs once per
    distinct value; a missing value (NaN) passes no test."""

    def __init__(self, values: object) -> None:
        self.codes, uniq = pd.factorize(values)
        self.values = list(uniq)

    def isin(self, wanted: Collection[object]) -> np.ndarray:
        return np.r_[np.array([v in wanted for v in self.values], dtype=bool), False][self.codes]
