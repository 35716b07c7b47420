"""A RankTrace whose GPU table is held compressed: the caller's memory per rank at many ranks.

`analyze` gets every rank's GPU table back from the per-rank stage and its cross-rank stage reads
them rank by rank (frames, matching, order comparison, peer wait, collectives, stragglers). Held as
DataFrames they cost 2.2 MB a rank of 22,000 activities (2.3 GB at 1024 ranks); as a zstd-compressed
Arrow IPC stream they cost a small fraction of that, and unpacking one takes milliseconds. A
PackedRankTrace keeps the
packed bytes and unpacks on access; the last UNPACKED_HELD tables unpacked (over all packed traces)
stay unpacked, so a stage that walks the ranks unpacks each once and never holds more than that many.
The unpacked table equals the table packed (Arrow keeps dtypes, categories and the index through
the pandas metadata; no pickle: nothing the analyzers unpack can run code), so every result is the
same as with the plain trace. Sent between processes it travels packed (the worker sends the small
bytes).
Readers must not modify the table in place (none does: tables are replaced, never edited).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import fields
from typing import Any

import pandas as pd
import pyarrow as pa

from analyzers.timeline.model import RankTrace, gpu_table_checksum

UNPACKED_HELD = 8  # tables held unpacked at once, over all packed traces
_IPC = pa.ipc.IpcWriteOptions(compression="zstd")


def _pack(table: pd.DataFrame) -> bytes:
    arrow = pa.Table.from_pandas(table)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, arrow.schema, options=_IPC) as writer:
        writer.write_table(arrow)
    return sink.getvalue().to_pybytes()


def _unpack(raw: bytes) -> pd.DataFrame:
    return pa.ipc.open_stream(raw).read_all().to_pandas()

_lock = threading.RLock()  # re-entered when dropping the last reference of a trace runs _forget
_unpacked: OrderedDict[int, weakref.ref] = OrderedDict()  # id -> trace holding its table unpacked


def _hold(trace: PackedRankTrace) -> None:
    """Mark trace's table as the most recently unpacked; forget the unpacked table of the oldest past the limit."""
    key = id(trace)
    with _lock:
        _unpacked.pop(key, None)
        _unpacked[key] = weakref.ref(trace, lambda _r, k=key: _forget(k))
        while len(_unpacked) > UNPACKED_HELD:
            _, ref = _unpacked.popitem(last=False)
            old = ref()
            if old is not None:
                old.__dict__.pop("_gpu_table", None)


def _forget(key: int) -> None:
    with _lock:
        _unpacked.pop(key, None)


class PackedRankTrace(RankTrace):
    """RankTrace with `gpu` packed (see the module docstring); build with packed(trace)."""

    @property  # type: ignore[override]
    def gpu(self) -> pd.DataFrame:
        table = self.__dict__.get("_gpu_table")
        if table is None:
            table = _unpack(self.__dict__["_gpu_packed"])
            self.__dict__["_gpu_table"] = table
        _hold(self)
        return table

    @gpu.setter
    def gpu(self, table: pd.DataFrame) -> None:
        self.__dict__["_gpu_packed"] = _pack(table)
        self.__dict__["_gpu_checksum"] = gpu_table_checksum(table)  # the same as of the table unpacked
        self.__dict__.pop("_gpu_table", None)

    def gpu_checksum(self) -> int:
        return self.__dict__["_gpu_checksum"]

    def packed_bytes(self) -> int:
        return len(self.__dict__["_gpu_packed"])

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_gpu_table"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


def packed(trace: RankTrace) -> PackedRankTrace:
    """The same trace with its GPU table packed."""
    if isinstance(trace, PackedRankTrace):
        return trace
    return PackedRankTrace(**{f.name: getattr(trace, f.name) for f in fields(trace)})


class PackedFrame:
    """One DataFrame held as a zstd Arrow IPC stream (the same packing as a PackedRankTrace's GPU table): what
    the caller keeps of a rank's per-event rows (its blocking syncs: 0.9 MB as a DataFrame for 5,200 syncs)."""

    __slots__ = ("raw", "rows")

    def __init__(self, frame: pd.DataFrame) -> None:
        self.raw = _pack(frame)
        self.rows = len(frame)

    def __len__(self) -> int:
        return self.rows

    def frame(self) -> pd.DataFrame:
        return _unpack(self.raw)


class PackedFrames(Mapping[int, pd.DataFrame]):
    """rank -> DataFrame, each held packed (PackedFrame) or as given, unpacked on access; the last few unpacked
    stay so (a reader that walks the ranks unpacks each once). Equal frames come out: readers see no difference."""

    HELD = 8

    def __init__(self, frames: Mapping[int, pd.DataFrame | PackedFrame]) -> None:
        self._frames = dict(frames)
        self._held: OrderedDict[int, pd.DataFrame] = OrderedDict()

    def __getitem__(self, key: int) -> pd.DataFrame:
        got = self._frames[key]
        if not isinstance(got, PackedFrame):
            return got
        with _lock:
            if (frame := self._held.get(key)) is None:
                frame = self._held[key] = got.frame()
                while len(self._held) > self.HELD:
                    self._held.popitem(last=False)
            else:
                self._held.move_to_end(key)
        return frame

    def __iter__(self) -> Iterator[int]:
        return iter(self._frames)

    def __len__(self) -> int:
        return len(self._frames)

    def rows(self, key: int) -> int:
        """Rows of one frame, without unpacking it."""
        return len(self._frames[key])
