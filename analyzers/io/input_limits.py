"""Limits every trace input is held to, whichever loader reads it.

A trace is whatever a profiler (or a killed job, or a colleague) left on disk, so the loaders
call these checks before trusting it:

- gzip is unpacked in bounded chunks and refused once it grows past a size cap or an
  implausible packing ratio (a gzip bomb is a few MB that unpack to many GB): memory stays
  bounded by the cap, not by what the file claims;
- timestamps and durations must be finite, non-negative durations, and fit the int64
  nanosecond clock the analyses use (absurd values would overflow it silently);
- JSON nesting deeper than the decoder's recursion guard is named as such;
- an event whose time is missing is refused, never read as time zero;
- event counts, file counts, ranks and world sizes stay within documented limits.

The caps come from the environment so a user with a genuinely huge trace can raise them;
the messages say how. Violations raise InputLimitError (a ValueError carrying one line);
analyzers.load turns it into a BadInputError naming the file.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np
import pandas as pd

from analyzers.timeline.model import RankTrace

ENV_MAX_TRACE_MB = "OVERLAPSCOPE_MAX_TRACE_MB"
ENV_MAX_GZIP_RATIO = "OVERLAPSCOPE_MAX_GZIP_RATIO"
ENV_MAX_EVENTS = "OVERLAPSCOPE_MAX_EVENTS"
ENV_MAX_FILES = "OVERLAPSCOPE_MAX_FILES"
DEFAULT_MAX_EVENTS = 5_000_000  # events of one Kineto file (about 1 GB of JSON; decoding holds ~0.6 kB an event)
COUNT_FROM_BYTES = 256 << 20  # files this large have their events counted before they are decoded
DEFAULT_MAX_FILES = 4096  # trace files of one run (one per rank)
MAX_WORLD_SIZE = 1 << 20  # ranks of one run: far above any job run so far, far below an int64 overflow
DEFAULT_MAX_TRACE_MB = 8192  # unpacked bytes one trace file may hold
DEFAULT_MAX_GZIP_RATIO = 100  # real traces pack 4x (SQLite exports) to ~21x (Kineto JSON)
RATIO_FREE_BYTES = 64 << 20  # below this, any ratio is fine (tiny traces of zeros pack very well)
CHUNK = 1 << 20

NS_PER_US = 1000
# A timestamp in µs must stay representable as int64 ns (±9.2e18 ns); keep a margin for sums.
MAX_ABS_TS_US = 4.0e15
MAX_ABS_TS_NS = int(MAX_ABS_TS_US) * 1000  # the same bound in ns: 4e18, half of int64's reach
MAX_DURATION_US = 7 * 24 * 3600 * 1e6  # a week: no profiler records a single event longer
MAX_DURATION_NS = int(MAX_DURATION_US * NS_PER_US)


class InputLimitError(ValueError):
    """One line saying which limit a trace broke (the caller adds the file name)."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(problem)


@dataclass(frozen=True)
class Limits:
    max_unpacked_bytes: int
    max_ratio: float
    max_events: int = DEFAULT_MAX_EVENTS
    max_files: int = DEFAULT_MAX_FILES

    @classmethod
    def from_env(cls) -> Limits:
        return cls(max_unpacked_bytes=_env_int(ENV_MAX_TRACE_MB, DEFAULT_MAX_TRACE_MB) << 20,
                   max_ratio=float(_env_int(ENV_MAX_GZIP_RATIO, DEFAULT_MAX_GZIP_RATIO)),
                   max_events=_env_int(ENV_MAX_EVENTS, DEFAULT_MAX_EVENTS),
                   max_files=_env_int(ENV_MAX_FILES, DEFAULT_MAX_FILES))


def _env_int(name: str, default: int) -> int:
    try:
        value = int(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


def check_file_size(size: int, limits: Limits | None = None) -> None:
    """A plain (unpacked) file over the size cap is refused before it is read."""
    limits = limits or Limits.from_env()
    if size > limits.max_unpacked_bytes:
        raise InputLimitError(f"file is {size / 2**20:,.0f} MB, over the {limits.max_unpacked_bytes >> 20:,} MB "
                              f"limit (set {ENV_MAX_TRACE_MB} to raise it)")


def check_event_count(n: int, limits: Limits | None = None) -> None:
    """A file holding more events than the limit is refused before tables are built from them."""
    limits = limits or Limits.from_env()
    if n > limits.max_events:
        raise InputLimitError(f"holds {n:,} events, over the {limits.max_events:,} limit "
                              f"(set {ENV_MAX_EVENTS} to raise it)")


def check_event_bytes(data: bytes | bytearray | memoryview | Any, limits: Limits | None = None) -> None:
    """Before decoding a large file (>= COUNT_FROM_BYTES), its events counted by their "ph" keys, in
    64 MB slices (a C-level search, ~0.5 s a GB; smaller files hold too few events to matter before the
    exact count after decoding): a small gzip of millions of tiny events is refused before the decoder
    holds them all."""
    if len(data) < COUNT_FROM_BYTES:
        return
    step, n = 64 << 20, 0
    for i in range(0, len(data), step):
        part = data[i:i + step + 3]  # the 3 bytes past the slice: a key across its end is counted once, here
        if b"\x00" in part:  # no JSON: the decoder refuses it at that byte, without reading the rest
            return
        n += part.count(b'"ph"')
    check_event_count(n, limits)


def check_rank_meta(rank: int, world_size: int | None, source: str) -> None:
    """A rank and world size a run can have: 0 <= rank < world_size <= MAX_WORLD_SIZE, whichever loader
    read them (Kineto distributedInfo, a file name, an nsys process environment or NCCL payload)."""
    where = f"(from {source})"
    if world_size is not None and not 1 <= world_size <= MAX_WORLD_SIZE:
        raise InputLimitError(f"world size {world_size} {where} is impossible "
                              f"(a run has 1 to {MAX_WORLD_SIZE:,} ranks)")
    if not 0 <= rank < MAX_WORLD_SIZE:
        raise InputLimitError(f"rank {rank} {where} is impossible (ranks run from 0 to {MAX_WORLD_SIZE - 1:,})")
    if world_size is not None and rank >= world_size:
        raise InputLimitError(f"rank {rank} {where} is not below the world size {world_size}")


def _gunzip_chunks(read: BinaryIO, packed_size: int, limits: Limits) -> Iterator[bytes]:
    """Unpacked chunks of a (possibly multi-member) gzip stream, refused past the limits."""
    out_total = 0
    decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
    in_member = False  # bytes of a member fed and its end not yet seen
    pending = b""
    while True:
        if decomp.unconsumed_tail:
            data = decomp.unconsumed_tail
        elif pending:
            data, pending = pending, b""
        else:
            data = read.read(CHUNK)
            if not data:
                break
        if not in_member:
            data = data.lstrip(b"\x00")  # zero padding between or after members, as gzip(1) allows
            if not data:
                continue
        in_member = True
        try:
            chunk = decomp.decompress(data, CHUNK)
        except zlib.error as exc:
            raise InputLimitError(f"truncated or corrupt gzip data ({exc})") from None
        if chunk:
            out_total += len(chunk)
            _check_growth(out_total, packed_size, limits)
            yield chunk
        if decomp.eof:  # one member done: another may follow (gzip allows concatenation)
            pending = decomp.unused_data
            decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
            in_member = False
    if in_member:
        raise InputLimitError("truncated or corrupt gzip data (Compressed file ended before the end-of-stream "
                              "marker was reached)")  # the words of Python's gzip module, which users search


def _check_growth(out_total: int, packed_size: int, limits: Limits) -> None:
    if out_total > limits.max_unpacked_bytes:
        raise InputLimitError(f"gzip data unpacks to more than the {limits.max_unpacked_bytes >> 20:,} MB limit "
                              f"(set {ENV_MAX_TRACE_MB} to raise it)")
    if out_total > RATIO_FREE_BYTES and out_total > limits.max_ratio * max(packed_size, 1):
        raise InputLimitError(f"gzip data unpacks more than {limits.max_ratio:.0f}x its packed size "
                              f"({packed_size:,} bytes -> over {out_total:,}): refused as a likely gzip bomb "
                              f"(set {ENV_MAX_GZIP_RATIO} to raise the ratio)")


def gunzip_into(src: BinaryIO, packed_size: int, limits: Limits | None = None) -> bytearray:
    """Unpack src into one growing buffer (no second copy), within the limits."""
    limits = limits or Limits.from_env()
    out = bytearray()
    for chunk in _gunzip_chunks(src, packed_size, limits):
        out += chunk
    return out


def gunzip_stream(src: BinaryIO, packed_size: int, dst: BinaryIO, limits: Limits | None = None) -> int:
    """Unpack src into dst chunk by chunk (constant memory); returns the unpacked size."""
    limits = limits or Limits.from_env()
    total = 0
    for chunk in _gunzip_chunks(src, packed_size, limits):
        dst.write(chunk)
        total += len(chunk)
    return total


def check_us_times(ts_us: Sequence[float] | np.ndarray, dur_us: Sequence[float] | np.ndarray,
                   what: str = "event", name_of: Callable[[int], str] | None = None) -> None:
    """Kineto-style float µs timestamps and durations: finite, durations >= 0, inside the int64 ns clock.

    Vectorized (one pass per rule over the arrays); only the first offending event is named
    (name_of(i) gives its name).
    """
    ts = np.asarray(ts_us, dtype=np.float64)
    dur = np.asarray(dur_us, dtype=np.float64)
    if not len(ts):
        return

    def which(i: int) -> str:
        name = f" {str(name_of(i))[:80]!r}" if name_of is not None else ""
        return f"{what}{name} (#{i})"

    for label, values in (("timestamp", ts), ("duration", dur)):
        missing = np.isnan(values)  # JSON holds no NaN (the decoder refuses the token): a missing or null field
        if missing.any():
            i = int(np.argmax(missing))
            raise InputLimitError(f"{which(i)} has no {label} (missing or null): its time cannot be read")
        bad = ~np.isfinite(values)
        if bad.any():
            i = int(np.argmax(bad))
            raise InputLimitError(f"{which(i)} has a non-finite {label} ({values[i]})")
    neg = dur < 0
    if neg.any():
        i = int(np.argmax(neg))
        raise InputLimitError(f"{which(i)} has a negative duration ({dur[i]:g} µs)")
    huge = dur > MAX_DURATION_US
    if huge.any():
        i = int(np.argmax(huge))
        raise InputLimitError(f"{which(i)} has an absurd duration ({dur[i]:.3g} µs, over a week)")
    far = np.abs(ts) > MAX_ABS_TS_US
    if far.any():
        i = int(np.argmax(far))
        raise InputLimitError(f"{which(i)} has an absurd timestamp ({ts[i]:.3g} µs): outside the "
                              "int64 nanosecond clock")


def check_ns_table(table: pd.DataFrame, what: str) -> None:
    """A loaded table of (start_ns, end_ns): times inside the int64 clock (|t| <= MAX_ABS_TS_NS, so that
    no difference of two times wraps), ends not before starts (compared, not subtracted: start = INT64_MAX
    with a negative end wrapped to a short row), durations below a week."""
    if table is None or not len(table):
        return
    start = table["start_ns"].to_numpy()
    end = table["end_ns"].to_numpy()
    for label, t in (("start", start), ("end", end)):
        far = (t > MAX_ABS_TS_NS) | (t < -MAX_ABS_TS_NS)
        if far.any():
            i = int(np.argmax(far))
            raise InputLimitError(f"a {what} row has an absurd {label} time ({t[i]} ns): outside the int64 "
                                  "nanosecond clock")
    if (end < start).any():
        i = int(np.argmax(end < start))
        raise InputLimitError(f"a {what} row ends before it starts (start {start[i]} ns, end {end[i]} ns)")
    dur = end - start
    if (dur > MAX_DURATION_NS).any():
        i = int(np.argmax(dur > MAX_DURATION_NS))
        raise InputLimitError(f"a {what} row has an absurd duration ({dur[i] / 1e9:.3g} s, over a week)")


def check_loaded_times(trace: RankTrace) -> None:
    """Every interval table of a loaded rank trace, whatever its format (see check_ns_table)."""
    for what, table in (("GPU activity", trace.gpu), ("CUDA API", trace.runtime), ("host range", trace.host_ops),
                        ("sync", trace.sync_events)):
        check_ns_table(table, what)


def json_problem(data: bytes, decoder_message: str) -> str:
    """The JSON decoder's complaint in the user's words: truncation, or what sits at the bad byte."""
    if "truncated" in decoder_message.lower():
        return "truncated JSON"
    m = re.search(r"\(byte (\d+)\)", decoder_message)
    at = data[int(m.group(1)):int(m.group(1)) + 9] if m else b""
    for token in (b"NaN", b"Infinity", b"-Infinity"):
        if at.startswith(token):
            return (f"not valid JSON: {token.decode()} at byte {m.group(1)} is not a JSON number "  # type: ignore[union-attr]
                    "(the writer put a non-finite time or value in the trace)")
    return f"not valid JSON ({decoder_message})"
