"""JSON-safe data in one C-level pass (msgspec), instead of walking results element by element.

Analyses hold numpy scalars and arrays, NaN for undefined figures, tuples and integer keys.
``to_plain`` turns any such nesting into plain Python (NaN/inf -> None, numpy -> Python,
tuples -> lists, keys -> str) by encoding it once with msgspec and decoding the bytes;
``to_json`` writes the same document as indented JSON text. Both give the same JSON for a
document whatever is left in it to clean, so a report's JSON is encoded straight from its raw
document (``document()`` methods), never cleaned first.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pandas as pd

from analyzers.timeline.constants import NO_TIME


def _enc_hook(obj: Any) -> Any:
    """What msgspec does not encode itself: numpy values, pandas missing values, the rest as str."""
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is pd.NA or obj is pd.NaT:
        return None
    if isinstance(obj, pd.Timestamp):
        return obj.isoformat()
    return str(obj)


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook)


def encode(obj: Any) -> bytes:
    """Compact JSON bytes (NaN and inf written as null)."""
    return _ENCODER.encode(obj)


def to_plain(obj: Any) -> Any:
    """A plain-Python, JSON-safe copy of obj."""
    return msgspec.json.decode(_ENCODER.encode(obj))


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """A frame's rows as plain dicts (missing values -> None)."""
    return to_plain(rows(df))


def rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    """A frame's rows as dicts ready to encode (NaN and pandas' missing values still in them: for a
    document that is made plain, or encoded, once as a whole). Columns come out whole (``tolist``:
    Python scalars in C) instead of pandas' to_dict, which boxes value by value."""
    keys = list(df.columns)
    if not keys:
        return [{} for _ in range(len(df))]
    columns = [_plain_column(col) for _, col in df.items()]  # by position (repeated labels too), without iloc's cost
    return [dict(zip(keys, row, strict=True)) for row in zip(*columns, strict=True)]


def to_json(obj: Any, indent: int = 2) -> str:
    """Indented JSON text of obj."""
    return json_bytes(obj, indent).decode()


def json_bytes(obj: Any, indent: int = 2) -> bytes:
    """Indented JSON of obj as UTF-8 bytes (what a file or a pipe takes, without a str in between)."""
    return msgspec.json.format(_ENCODER.encode(obj), indent=indent)


def _plain_column(col: pd.Series) -> list[Any]:
    """A column's values; an int64 column's NO_TIME ("no time", the smallest int64) as None (null), so
    that no sentinel reaches a document."""
    values = col.tolist()
    if col.dtype == np.int64 and len(col) and (col.to_numpy() == NO_TIME).any():
        values = [None if v == NO_TIME else v for v in values]
    return values
