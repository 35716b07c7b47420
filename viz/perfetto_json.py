"""Chrome-trace JSON (ui.perfetto.dev, chrome://tracing) from analyzers.export.perfetto data.

A million GPU activities are written without a Python object per event: every column becomes
an Arrow string column in C++ (integers cast, times as exact microseconds with three
decimals, names JSON-escaped once per distinct name and taken by code), one element-wise join
makes the lines, and the joined column's value buffer *is* the JSON text. `.gz` output is gzip.
"""

from __future__ import annotations

import gzip
import io
from contextlib import nullcontext
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from analyzers.export.perfetto import PerfettoData
from analyzers.io.plain import encode

SEP = ",\n"
GZIP_LEVEL = 1  # 1M kernels: ~40 MB at level 1; higher levels cost seconds for a few MB




def _join(*parts: object) -> pa.Array:
    """Element-wise concatenation of Arrow string columns and literal strings."""
    return pc.binary_join_element_wise(*(pa.scalar(p, pa.large_string()) if isinstance(p, str) else p
                                         for p in parts), pa.scalar("", pa.large_string()))


def _text(values: object) -> pa.Array:
    return pc.cast(pa.array(np.asarray(values, dtype=np.int64)), pa.large_string())


def _us(ns: np.ndarray) -> pa.Array:
    """Non-negative int64 ns -> exact microseconds as text ("1234.567")."""
    q, r = np.divmod(np.asarray(ns, dtype=np.int64), 1000)
    return _join(_text(q), ".", pc.utf8_lpad(_text(r), 3, "0"))


def _quoted(values: pd.Series) -> pa.Array:
    """JSON string literals, each distinct value escaped once (categoricals: by their codes)."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        codes, uniques = values.cat.codes.to_numpy(), values.cat.categories
    else:
        codes, uniques = pd.factorize(values.astype(object), use_na_sentinel=False)
    table = pa.array([encode(str(u)).decode() for u in uniques], pa.large_string())
    return table.take(pa.array(np.asarray(codes, dtype=np.int64)))


def _complete(frame: pd.DataFrame, args: pa.Array) -> bytes | memoryview:
    """Complete ("X") events, each followed by SEP, as one block of text."""
    if frame.empty:
        return b""
    s = frame["start_ns"].to_numpy(dtype=np.int64)
    e = frame["end_ns"].to_numpy(dtype=np.int64)
    lines = _join('{"ph":"X","pid":', _text(frame["pid"]), ',"tid":', _text(frame["tid"]), ',"ts":', _us(s),
                  ',"dur":', _us(e - s), ',"name":', _quoted(frame["name"]), ',"cat":', _quoted(frame["cat"]),
                  ',"args":', args, "}" + SEP)
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)[lines.offset: lines.offset + len(lines) + 1]
    return memoryview(lines.buffers()[2])[int(offsets[0]): int(offsets[-1])]  # the text itself, not a copy


def _metadata(data: PerfettoData) -> list[dict]:
    meta = []
    for p in data.processes.itertuples(index=False):
        meta.append({"ph": "M", "pid": int(p.pid), "tid": 0, "name": "process_name", "args": {"name": p.name}})
        meta.append({"ph": "M", "pid": int(p.pid), "tid": 0, "name": "process_sort_index",
                     "args": {"sort_index": int(p.sort)}})
    for t in data.tracks.itertuples(index=False):
        meta.append({"ph": "M", "pid": int(t.pid), "tid": int(t.tid), "name": "thread_name", "args": {"name": t.name}})
        meta.append({"ph": "M", "pid": int(t.pid), "tid": int(t.tid), "name": "thread_sort_index",
                     "args": {"sort_index": int(t.sort)}})
    return meta


def event_blocks(data: PerfettoData) -> list[bytes | memoryview]:
    """The traceEvents array's contents in blocks, every event followed by SEP (metadata first)."""
    small = [encode(m) + SEP.encode() for m in _metadata(data)]
    g = data.gpu
    gpu_args = _join('{"correlation":', _text(g["correlation"]), ',"kind":', _quoted(g["kind"]), "}") if len(g) \
        else None
    blocks = [b"".join(small), _complete(g, gpu_args)]
    sp = data.spans
    if len(sp):
        span_args = pa.array([encode(a or {}).decode() for a in sp["args"]], pa.large_string())
        blocks.append(_complete(sp, span_args))
    for m in data.markers:
        ts = f"{m['ts_ns'] // 1000}.{m['ts_ns'] % 1000:03d}"
        name, args = encode(m["name"]).decode(), encode(m["args"]).decode()
        blocks.append(f'{{"ph":"i","s":"t","pid":{m["pid"]},"tid":{m["tid"]},"ts":{ts},"name":{name},'
                      f'"cat":"finding","args":{args}}}{SEP}'.encode())
    return blocks


def _stream(data: PerfettoData, fh: BinaryIO) -> None:
    """The file's bytes into fh, block by block (no copy of the whole text); the last SEP becomes the end."""
    fh.write(('{"displayTimeUnit":"ns","otherData":' + encode({"overlapscope": data.meta}).decode()
              + ',"traceEvents":[\n').encode())
    blocks = [b for b in event_blocks(data) if len(b)]
    for b in blocks[:-1]:
        fh.write(b)
    if blocks:
        fh.write(blocks[-1][: len(blocks[-1]) - len(SEP)])
    fh.write(b"\n]}\n")


def encode_perfetto(data: PerfettoData, gz: bool = False) -> bytes:
    """The whole trace file as bytes (gzip-compressed with gz)."""
    buf = io.BytesIO()
    with (gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=GZIP_LEVEL, mtime=0) if gz else nullcontext(buf)) as fh:
        _stream(data, fh)
    return buf.getvalue()


def write_perfetto(data: PerfettoData, out: Path) -> int:
    """Write the trace (gzip, at the fast level, when the name ends in .gz); returns the bytes written."""
    with (gzip.open(out, "wb", compresslevel=GZIP_LEVEL) if str(out).endswith(".gz") else open(out, "wb")) as fh:
        _stream(data, fh)
    return Path(out).stat().st_size
