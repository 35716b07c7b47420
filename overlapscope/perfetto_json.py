"""Chrome-trace JSON (ui.perfetto.dev, chrome://tracing) from analyzers.export_perfetto data.

A million GPU activities are written without a Python dict per event: each column is turned
into text once (names JSON-escaped per distinct name, times as exact microseconds with three
decimals) and the lines are joined by pandas string operations. `.gz` output is gzip.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd

from analyzers.export_perfetto import PerfettoData


def _plain(obj: object) -> object:
    """numpy scalars and arrays in args / evidence -> Python values."""
    if isinstance(obj, np.generic | np.ndarray):
        return obj.tolist()
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


_json = msgspec.json.Encoder(enc_hook=_plain)


def _us(ns: np.ndarray) -> pd.Series:
    """Non-negative int64 ns -> exact microseconds as text ("1234.567")."""
    q, r = np.divmod(np.asarray(ns, dtype=np.int64), 1000)
    return pd.Series(q).astype(str) + "." + pd.Series(r).astype(str).str.zfill(3)


def _quoted(values: np.ndarray | pd.Series) -> pd.Series:
    """JSON string literals, each distinct value escaped once."""
    codes, uniques = pd.factorize(pd.Series(values, dtype=object).astype(str), use_na_sentinel=False)
    table = np.asarray([_json.encode(str(u)).decode() for u in uniques], dtype=object)
    return pd.Series(table[codes] if len(table) else np.zeros(0, dtype=object), dtype=object)


def _ints(values: np.ndarray | pd.Series) -> pd.Series:
    return pd.Series(np.asarray(values, dtype=np.int64)).astype(str)


def _complete(frame: pd.DataFrame, args: pd.Series) -> pd.Series:
    if frame.empty:
        return pd.Series([], dtype=object)
    s = frame["start_ns"].to_numpy(dtype=np.int64)
    e = frame["end_ns"].to_numpy(dtype=np.int64)
    return ('{"ph":"X","pid":' + _ints(frame["pid"]) + ',"tid":' + _ints(frame["tid"]) + ',"ts":' + _us(s)
            + ',"dur":' + _us(e - s) + ',"name":' + _quoted(frame["name"].to_numpy()) + ',"cat":'
            + _quoted(frame["cat"].to_numpy()) + ',"args":' + args.reset_index(drop=True) + "}")


def event_lines(data: PerfettoData) -> list[str]:
    """Every event of the trace as one JSON object per string (metadata first)."""
    meta = []
    for p in data.processes.itertuples(index=False):
        meta.append({"ph": "M", "pid": int(p.pid), "tid": 0, "name": "process_name", "args": {"name": p.name}})
        meta.append({"ph": "M", "pid": int(p.pid), "tid": 0, "name": "process_sort_index",
                     "args": {"sort_index": int(p.sort)}})
    for t in data.tracks.itertuples(index=False):
        meta.append({"ph": "M", "pid": int(t.pid), "tid": int(t.tid), "name": "thread_name", "args": {"name": t.name}})
        meta.append({"ph": "M", "pid": int(t.pid), "tid": int(t.tid), "name": "thread_sort_index",
                     "args": {"sort_index": int(t.sort)}})
    lines = [_json.encode(m).decode() for m in meta]
    g = data.gpu
    if len(g):
        gpu_args = '{"correlation":' + _ints(g["correlation"]) + ',"kind":' + _quoted(g["kind"].to_numpy()) + "}"
        lines += _complete(g, gpu_args).tolist()
    sp = data.spans
    if len(sp):
        span_args = pd.Series([_json.encode(a or {}).decode() for a in sp["args"]], dtype=object)
        lines += _complete(sp, span_args).tolist()
    for m in data.markers:
        ts = _us(np.asarray([m["ts_ns"]]))[0]
        name, args = _json.encode(m["name"]).decode(), _json.encode(m["args"]).decode()
        lines.append(f'{{"ph":"i","s":"t","pid":{m["pid"]},"tid":{m["tid"]},"ts":{ts},"name":{name},'
                     f'"cat":"finding","args":{args}}}')
    return lines


def encode_perfetto(data: PerfettoData, gz: bool = False) -> bytes:
    """The whole trace file as bytes (gzip-compressed with gz)."""
    head = ('{"displayTimeUnit":"ns","otherData":' + _json.encode({"overlapscope": data.meta}).decode()
            + ',"traceEvents":[\n')
    payload = head.encode() + ",\n".join(event_lines(data)).encode() + b"\n]}\n"
    return gzip.compress(payload, compresslevel=3) if gz else payload


def write_perfetto(data: PerfettoData, out: Path) -> int:
    """Write the trace (gzip when the name ends in .gz); returns the bytes written."""
    Path(out).write_bytes(encode_perfetto(data, gz=str(out).endswith(".gz")))
    return Path(out).stat().st_size
