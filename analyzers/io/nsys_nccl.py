"""NCCL's NVTX ranges in an nsys export: each call's payload (communicator, message bytes) on the kernel it launched.

NCCL opens an NVTX range in its own "NCCL" domain around every API call (``ncclAllReduce``,
``ncclSend``, ``ncclGroupEnd``, ``ncclCommInitRankConfig`` ...) with a payload: the communicator's
hash, the message size in bytes and, for communicator set-up, its number of ranks. ``nsys export``
writes the payload as JSON text (``--include-json true``: NVTX_EVENTS.jsonText / jsonTextId) or as
binary data described by the exported payload schema (``--include-blobs true``: binaryData with
NVTX_PAYLOAD_SCHEMAS / NVTX_PAYLOAD_SCHEMA_ENTRIES); a plain export keeps neither.

Each NCCL kernel is tied to its call on the host: the call's range, on one thread, encloses the CUDA
launch (``cuLaunchKernelEx``) whose correlation id names the kernel. Inside
``ncclGroupStart`` / ``ncclGroupEnd`` NCCL launches at the outermost group end instead; such a kernel
takes the payload of its group's call only when the group held exactly one call with a payload and
its end launched exactly one NCCL kernel (torch's send / recv). Groups of several calls (batched
p2p, coalesced collectives) are fused by NCCL into kernels no single payload describes: their sizes
stay unknown and are counted in a note.

The kernel then gets what the Kineto reader gets from the profiler's arguments: ``msg_nelems`` /
``out_nelems`` (NCCL's per-rank "Message size [bytes]" scaled to the whole buffer as
SIZE_RULES says), ``dtype`` (the element type the kernel name names, else bytes), ``group_size`` (the
communicator's "No. of ranks") and ``pg`` (the communicator's hash). Everything read from the file is
data: payloads are decoded in Python, and a payload that does not decode is counted, never fatal.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

import msgspec
import numpy as np
import pandas as pd

from analyzers.io.nsys_schema import PID_SQL, T_NVTX, TID_SQL, _Export, quote
from analyzers.io.nsys_tables import _nvtx_range_types

NCCL_DOMAIN = "NCCL"
T_SCHEMA_ENTRIES = "NVTX_PAYLOAD_SCHEMA_ENTRIES"
DOMAIN_CREATE = ("NvtxDomainCreate", 75)  # ENUM_NSYS_EVENT_TYPE name and number
KEY_COMM, KEY_SIZE, KEY_NRANKS, KEY_RANK = "NCCL communicator ID", "Message size [bytes]", "No. of ranks", "Rank"
GROUP_START, GROUP_END = "GroupStart", "GroupEnd"
MAX_MESSAGE_BYTES = 1 << 42  # 4 TiB a rank: larger is no real message (and × ranks would leave int64)
MAX_RANKS = 1 << 20

# NCCL call -> (input is size × ranks, output is size × ranks), "Message size [bytes]" being per rank:
# all-gather's send buffer, reduce-scatter's receive buffer, all-to-all's block for one peer
# (NCCL's collectives.cc; checked against benchmarks/nccl_payload_probe.py, tests/data/nccl-nvtx).
SIZE_RULES: dict[str, tuple[bool, bool]] = {
    "AllReduce": (False, False), "Broadcast": (False, False), "Reduce": (False, False),
    "Send": (False, False), "Recv": (False, False),
    "AllGather": (False, True), "ReduceScatter": (True, False), "AlltoAll": (True, True),
}
# The element type in an NCCL kernel's name (reductions only: NCCL moves other data as bytes), as the
# PyTorch profiler spells dtypes, so link_peaks.dtype_bytes sizes it.
_KERNEL_DTYPE = re.compile(r"_(?:Sum|Prod|Min|Max|Avg|PreMulSum|SumPostDiv)_([A-Za-z0-9]+?)(?:_|\(|$)")
_DTYPES = {"i8": "Char", "int8_t": "Char", "u8": "Byte", "uint8_t": "Byte", "i32": "Int", "int32_t": "Int",
           "u32": "UInt32", "uint32_t": "UInt32", "i64": "Long", "int64_t": "Long", "u64": "UInt64",
           "uint64_t": "UInt64", "f16": "Half", "half": "Half", "f32": "Float", "float": "Float", "f64": "Double",
           "double": "Double", "bf16": "BFloat16", "bfloat16": "BFloat16", "f8e4m3": "Float8_e4m3fn",
           "f8e5m2": "Float8_e5m2"}
_DTYPE_BYTES = {"Char": 1, "Byte": 1, "Int": 4, "UInt32": 4, "Long": 8, "UInt64": 8, "Half": 2, "Float": 4,
                "Double": 8, "BFloat16": 2, "Float8_e4m3fn": 1, "Float8_e5m2": 1}
_NCCL_KERNEL = re.compile(r"^(?:void\s+)?[nr]ccl")
# NVTX payload entry types (nvToolsExtPayload.h) -> struct format, on the 64-bit Linux hosts NCCL runs on.
_ENTRY_FORMATS = {1: "b", 2: "B", 3: "h", 4: "H", 5: "i", 6: "I", 7: "q", 8: "Q", 9: "q", 10: "Q", 11: "b",
                  12: "B", 13: "h", 14: "H", 15: "i", 16: "I", 17: "q", 18: "Q", 22: "Q", 23: "Q"}
_CALL_COLUMNS = ["pid", "tid", "start_ns", "end_ns", "api", "comm", "size", "nranks", "rank"]


@dataclass
class NcclCalls:
    """The NCCL ranges of one export: one row per call (api "AllReduce", "GroupEnd", ...), its payload
    (comm: the communicator's hash, or -1; size: message bytes; nranks and rank: the communicator's number
    of ranks and this process's rank in it, at set-up; -1 each when absent) and counts."""

    calls: pd.DataFrame
    n_payload: int = 0  # calls whose payload was read
    n_bad: int = 0  # calls whose payload did not decode (malformed JSON or binary data)
    comm_ranks: dict[int, int] = field(default_factory=dict)  # communicator -> its number of ranks

    def of(self, pid: int) -> pd.DataFrame:
        return self.calls[self.calls["pid"] == pid]


def read_nccl_calls(ex: _Export) -> NcclCalls | None:
    """The export's NCCL NVTX ranges with their payloads; None when it has none."""
    if not ex.has(T_NVTX) or "globalTid" not in ex.columns(T_NVTX):
        return None
    cols = ex.columns(T_NVTX)
    domains = _nccl_domains(ex) if {"domainId", "eventType"} <= set(cols) else None
    if domains is not None and not domains:
        return None
    where = 'start IS NOT NULL AND "end" IS NOT NULL AND "end" >= start'
    if "eventType" in cols:
        where += f' AND eventType IN ({", ".join(str(int(t)) for t in _nvtx_range_types(ex))})'
    if domains:
        where += f' AND domainId IN ({", ".join(str(int(d)) for d in sorted({d for _, d in domains}))})'
    text_sql = '"text"' if "text" in cols else "NULL"
    # as bytes: a payload is decoded (and its UTF-8 checked) in Python, where a bad one is counted, not fatal
    js_sql = 'CAST("jsonText" AS BLOB)' if "jsonText" in cols else "NULL"
    blob_sql = 'CAST("binaryData" AS BLOB)' if "binaryData" in cols else "NULL"
    df = ex.query(
        f'SELECT start AS start_ns, "end" AS end_ns, {PID_SQL.format(col="globalTid")} AS pid, '
        f'{TID_SQL.format(col="globalTid")} AS tid, {_int_sql(ex, T_NVTX, "domainId")} AS domain, '
        f'{text_sql} AS text, {_int_sql(ex, T_NVTX, "textId")} AS text_id, {js_sql} AS js, '
        f'{_int_sql(ex, T_NVTX, "jsonTextId")} AS js_id, {blob_sql} AS blob FROM {quote(T_NVTX)} WHERE {where}')
    if df.empty:
        return None
    text = df["text"].to_numpy(dtype=object)
    name = np.where(pd.isna(text), ex.strings(df["text_id"].to_numpy(dtype=np.int64)), text).astype(str)
    keep = np.char.startswith(name.astype(str), "nccl")
    if domains:
        keys = pd.MultiIndex.from_arrays([df["pid"].to_numpy(np.int64), df["domain"].to_numpy(np.int64)])
        keep &= keys.isin(list(domains))
    df, name = df[keep].reset_index(drop=True), name[keep]
    if df.empty:
        return None
    js = df["js"].to_numpy(dtype=object)
    js = np.where(pd.isna(js), ex.strings(df["js_id"].to_numpy(dtype=np.int64)), js)
    blobs, domain = df["blob"].to_numpy(dtype=object), df["domain"].to_numpy(np.int64)
    # One key a row (its JSON text, else its domain and binary data): payloads repeat, each is decoded once.
    keys = [("j", t) if isinstance(t, str | bytes) and t else ("b", int(d), b) if isinstance(b, bytes) else None
            for t, b, d in zip(js, blobs, domain, strict=True)]
    codes, uniques = pd.factorize(pd.Series(keys, dtype=object), use_na_sentinel=True)
    schemas = _schemas(ex) if any(u[0] == "b" for u in uniques) else {}
    values = [_values(_json_payload(u[1]) if u[0] == "j" else _blob_payload(u[2], schemas.get(u[1], {})))
              for u in uniques]
    state = np.array([values[c][4] if c >= 0 else "none" for c in codes], dtype=object)
    comm = np.array([values[c][0] if c >= 0 else -1 for c in codes], dtype=object)
    size, nranks, rank = (np.array([values[c][k] if c >= 0 else -1 for c in codes], dtype=np.int64)
                          for k in (1, 2, 3))
    if domains is None:  # no domain names in the export: only payloads that name NCCL's fields count
        keep = (state == "ok") | np.isin(np.asarray([n[4:] for n in name], dtype=object), [GROUP_START, GROUP_END])
        df, name, comm, size, nranks, rank, state = (df[keep], name[keep], comm[keep], size[keep], nranks[keep],
                                                     rank[keep], state[keep])
    calls = pd.DataFrame({
        "pid": df["pid"].to_numpy(np.int64), "tid": df["tid"].to_numpy(np.int64),
        "start_ns": df["start_ns"].to_numpy(np.int64), "end_ns": df["end_ns"].to_numpy(np.int64),
        "api": np.asarray([n[4:] for n in name], dtype=object),
        "comm": comm, "size": size, "nranks": nranks, "rank": rank,
    })
    ranks = {int(c): int(n) for c, n in zip(comm, nranks, strict=True) if c != -1 and n > 0}
    return NcclCalls(calls[_CALL_COLUMNS], int((state == "ok").sum()), int((state == "bad").sum()), ranks)


def _nccl_domains(ex: _Export) -> set[tuple[int, int]] | None:
    """(pid, domain id) of every NVTX domain named "NCCL"; None when the export names no domains at all."""
    by_name = {v: k for k, v in ex.enum("ENUM_NSYS_EVENT_TYPE", "name").items()}
    kind = by_name.get(DOMAIN_CREATE[0], DOMAIN_CREATE[1])
    text_sql = '"text"' if "text" in ex.columns(T_NVTX) else "NULL"
    df = ex.query(f'SELECT {PID_SQL.format(col="globalTid")} AS pid, {_int_sql(ex, T_NVTX, "domainId")} AS domain, '
                  f'{text_sql} AS text, {_int_sql(ex, T_NVTX, "textId")} AS text_id FROM {quote(T_NVTX)} '
                  f'WHERE eventType = {int(kind)} AND typeof(domainId) = \'integer\'')
    if df.empty:
        return None
    text = df["text"].to_numpy(dtype=object)
    names = np.where(pd.isna(text), ex.strings(df["text_id"].to_numpy(dtype=np.int64)), text)
    return {(int(p), int(d)) for p, d, n in zip(df["pid"], df["domain"], names, strict=True) if n == NCCL_DOMAIN}


def _json_payload(text: str | bytes) -> dict | None:
    """A JSON object, or None for text that is not one (or not UTF-8)."""
    try:
        value = msgspec.json.decode(text)
    except (msgspec.DecodeError, UnicodeError):
        return None
    return value if isinstance(value, dict) else None


def _values(payload: dict | None) -> tuple[int, int, int, int, str]:
    """(communicator, message bytes, number of ranks, rank, state) of a decoded payload, -1 for each field
    it lacks; state "ok", "bad" (undecodable, or a field of the wrong type or range) or "none" (no NCCL field)."""
    if payload is None:
        return -1, -1, -1, -1, "bad"
    got = (_int(payload.get(KEY_COMM), 1 << 64), _int(payload.get(KEY_SIZE), MAX_MESSAGE_BYTES + 1),
           _int(payload.get(KEY_NRANKS), MAX_RANKS + 1), _int(payload.get(KEY_RANK), MAX_RANKS))
    if any(v is False for v in got):
        return -1, -1, -1, -1, "bad"
    if all(v is None for v in got):
        return -1, -1, -1, -1, "none"
    comm, size, nranks, rank = (-1 if v is None else int(v) for v in got)
    return comm, size, nranks, rank, "ok"


def _schemas(ex: _Export) -> dict[int, dict[int, list[tuple[str, str, int]]]]:
    """domain -> schema id -> [(entry name, struct format, offset)] of the entries this reader can decode.

    An entry without an offset (after the first) sits at the next offset aligned to its size, NVTX's rule
    for static schemas; after an entry of a type this reader cannot size, such entries are left out."""
    t = T_SCHEMA_ENTRIES
    if not ex.has(t) or not {"domainId", "schemaId", "name", "type"} <= set(ex.columns(t)):
        return {}
    df = ex.query(f'SELECT {_int_sql(ex, t, "domainId")} AS domain, {_int_sql(ex, t, "schemaId")} AS schema, '
                  f'{_int_sql(ex, t, "idx")} AS idx, name, {_int_sql(ex, t, "type")} AS type, '
                  f'{_int_sql(ex, t, "offset")} AS off FROM {quote(t)} ORDER BY domain, schema, idx')
    out: dict[int, dict[int, list[tuple[str, str, int]]]] = {}
    cursor: dict[tuple[int, int], int | None] = {}
    for d, sc, name, kind, off in zip(df["domain"], df["schema"], df["name"], df["type"], df["off"], strict=True):
        fmt, key = _ENTRY_FORMATS.get(int(kind)), (int(d), int(sc))
        width = struct.calcsize(fmt) if fmt else None
        at = cursor.get(key, 0)
        if off > 0 or key not in cursor:
            at = max(int(off), 0)
        elif at is not None and width:
            at = -(-at // width) * width
        cursor[key] = None if at is None or width is None else at + width
        if fmt and at is not None and isinstance(name, str):
            out.setdefault(key[0], {}).setdefault(key[1], []).append((name, fmt, at))
    return out


def _int_sql(ex: _Export, table: str, column: str) -> str:
    """An integer column as SQL that gives -1 wherever the file holds anything but an integer."""
    if column not in ex.columns(table):
        return "-1"
    return f"CASE WHEN typeof({quote(column)}) = 'integer' THEN {quote(column)} ELSE -1 END"


def _blob_payload(blob: object, schemas: dict[int, list[tuple[str, str, int]]]) -> dict | None:
    """A binary payload decoded through its schema; None when it does not fit.

    The blob starts with the number of payloads (u64), then per payload its schema id, size and offset
    in the blob (u64 each): NCCL writes one payload a call, which is what is read.
    """
    if not isinstance(blob, bytes | bytearray | memoryview):
        return None
    data = bytes(blob)
    try:
        count, schema, size, offset = struct.unpack_from("<4Q", data, 0)
    except struct.error:
        return None
    entries = schemas.get(schema)
    if not 1 <= count <= 64 or entries is None or 8 + 24 * count > len(data) or offset + size > len(data):
        return None
    out: dict = {}
    for name, fmt, off in entries:
        if off + struct.calcsize(fmt) > size:
            return None
        out[name] = struct.unpack_from("<" + fmt, data, offset + off)[0]
    return out


def _int(value: object, limit: int) -> int | None | bool:
    """A payload field as an int in [0, limit); None when absent; False when present but not such an int."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
        return False
    return value


def attach_payloads(gpu: pd.DataFrame, kernel_names: np.ndarray, runtime: pd.DataFrame | None, calls: pd.DataFrame,
                    comm_ranks: dict[int, int]) -> list[str]:
    """Fill one process's GPU table (in place) from its NCCL calls; the notes on what stayed unknown.

    kernel_names: each GPU row's name; runtime: the process's CUDA API calls (tid, start_ns, end_ns,
    correlation); calls: its rows of NcclCalls.calls."""
    if runtime is None or runtime.empty or calls.empty or gpu.empty:
        return []
    calls = calls.sort_values(["tid", "start_ns"], kind="stable").reset_index(drop=True)
    krow, owner = _launches(gpu, kernel_names, runtime, calls)
    n_kernels = np.bincount(owner, minlength=len(calls))
    api, size = calls["api"].to_numpy(dtype=object), calls["size"].to_numpy(np.int64)
    sized = np.isin(api, list(SIZE_RULES)) & (size >= 0)
    chosen: dict[int, int] = {}  # GPU row -> call index
    for c in np.flatnonzero(sized & (n_kernels == 1)):
        chosen[int(krow[np.flatnonzero(owner == c)[0]])] = int(c)
    grouped, group_unknown = _group_calls(calls, sized, n_kernels)
    for c, end in grouped:
        chosen[int(krow[np.flatnonzero(owner == end)[0]])] = int(c)
    notes = []
    if group_unknown:
        notes.append(f"{group_unknown} NCCL kernels were launched at the end of an ncclGroupStart/ncclGroupEnd "
                     "group of several calls (or of calls without a size), which NCCL fuses: their message "
                     "sizes are unknown")
    several = int((sized & (n_kernels > 1)).sum())
    if several:
        notes.append(f"{several} NCCL calls launched several kernels: no kernel of theirs takes their message size")
    other = sorted({str(a) for a in api[(n_kernels > 0) & ~sized] if a not in (GROUP_START, GROUP_END)})
    if other:
        notes.append(f"NCCL kernels launched by {', '.join('nccl' + a for a in other[:5])} carry no size this "
                     "reader interprets")
    notes += _fill(gpu, kernel_names, chosen, calls, comm_ranks)
    return notes


def _launches(gpu: pd.DataFrame, kernel_names: np.ndarray, runtime: pd.DataFrame,
              calls: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(GPU row, enclosing NCCL call) of every NCCL kernel launched inside an NCCL call's range on its thread."""
    is_nccl = np.asarray(_per_name(kernel_names, lambda n: bool(_NCCL_KERNEL.match(n))), dtype=bool)
    kern = np.flatnonzero(is_nccl & (gpu["kind"] == "kernel").to_numpy() & (gpu["correlation"] >= 0).to_numpy())
    corr = pd.Series(kern, index=gpu["correlation"].to_numpy(np.int64)[kern])
    corr = corr[~corr.index.duplicated(keep=False)]  # a correlation id that names two kernels names neither
    rt_corr = runtime["correlation"].to_numpy(np.int64)
    pos = corr.index.get_indexer(rt_corr) if len(corr) else np.full(len(rt_corr), -1)
    hit = np.flatnonzero(pos >= 0)
    l_tid, l_start = runtime["tid"].to_numpy(np.int64)[hit], runtime["start_ns"].to_numpy(np.int64)[hit]
    l_end, l_row = runtime["end_ns"].to_numpy(np.int64)[hit], corr.to_numpy()[pos[hit]]
    c_tid, c_start, c_end = (calls[c].to_numpy(np.int64) for c in ("tid", "start_ns", "end_ns"))
    rows, owners = [], []
    for tid in np.unique(l_tid):
        lo, hi = np.searchsorted(c_tid, tid, "left"), np.searchsorted(c_tid, tid, "right")
        sel = np.flatnonzero(l_tid == tid)
        idx = lo + np.searchsorted(c_start[lo:hi], l_start[sel], "right") - 1  # the latest call begun before
        ok = (idx >= lo) & (c_end[np.maximum(idx, 0)] >= l_end[sel])
        rows.append(l_row[sel][ok])
        owners.append(idx[ok])
    if not rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(rows).astype(np.int64), np.concatenate(owners).astype(np.int64)


def _group_calls(calls: pd.DataFrame, sized: np.ndarray, n_kernels: np.ndarray) -> tuple[list[tuple[int, int]], int]:
    """([(call, its group's end)] for outermost groups of one sized call that launched nothing itself, whose
    end launched one kernel; kernels launched by the other group ends)."""
    api = calls["api"].to_numpy(dtype=object)
    marks = np.flatnonzero(np.isin(api, [GROUP_START, GROUP_END]))
    tid = calls["tid"].to_numpy(np.int64)
    found, unknown = [], 0
    depth, opened, cur_tid = 0, -1, None
    for m in marks:  # group starts and ends only: few beside the calls
        if tid[m] != cur_tid:
            depth, cur_tid = 0, tid[m]
        if api[m] == GROUP_START:
            opened = m if depth == 0 else opened
            depth += 1
            continue
        if depth == 0:  # an end without its start (the trace began inside a group)
            unknown += int(n_kernels[m])
            continue
        depth -= 1
        if depth or not n_kernels[m]:
            continue
        inside = np.arange(opened + 1, m)  # calls sorted by (thread, start): those between start and end
        ops = inside[~np.isin(api[inside], [GROUP_START, GROUP_END])]
        if n_kernels[m] == 1 and len(ops) == 1 and sized[ops[0]] and not n_kernels[ops[0]]:
            found.append((int(ops[0]), int(m)))
        else:
            unknown += int(n_kernels[m])
    return found, unknown


def _fill(gpu: pd.DataFrame, kernel_names: np.ndarray, chosen: dict[int, int], calls: pd.DataFrame,
          comm_ranks: dict[int, int]) -> list[str]:
    """Write msg_nelems, out_nelems, dtype, group_size and pg of the chosen rows."""
    if not chosen:
        return []
    rows = np.fromiter(chosen, dtype=np.int64, count=len(chosen))
    idx = np.fromiter(chosen.values(), dtype=np.int64, count=len(chosen))
    api, size = calls["api"].to_numpy(dtype=object)[idx], calls["size"].to_numpy(np.int64)[idx]
    comm = calls["comm"].to_numpy(dtype=object)[idx]
    nranks = np.array([comm_ranks.get(int(c), -1) if c != -1 else -1 for c in comm], dtype=np.int64)
    scale_in = np.array([SIZE_RULES[a][0] for a in api], dtype=bool)
    scale_out = np.array([SIZE_RULES[a][1] for a in api], dtype=bool)
    dtype = np.asarray(_per_name(kernel_names[rows], _kernel_dtype), dtype=object)
    esize = np.array([_DTYPE_BYTES[d] for d in dtype], dtype=np.int64)
    whole = size % esize == 0
    dtype, esize = np.where(whole, dtype, "Byte"), np.where(whole, esize, 1)
    needs_n = scale_in | scale_out
    known = ~needs_n | (nranks > 0)
    n = np.maximum(nranks, 1)
    col = {c: gpu[c].to_numpy(copy=True) for c in ("msg_nelems", "out_nelems", "group_size", "dtype", "pg")}
    col["msg_nelems"][rows] = np.where(known, size * np.where(scale_in, n, 1) // esize, -1)
    col["out_nelems"][rows] = np.where(known, size * np.where(scale_out, n, 1) // esize, -1)
    col["dtype"][rows] = np.where(known, dtype, "")
    col["group_size"][rows] = nranks
    col["pg"][rows] = [f"nccl:{int(c):016x}" if c != -1 else "" for c in comm]
    for c, v in col.items():
        gpu[c] = v
    missing = int((~known).sum())
    if missing:
        return [f"{missing} NCCL kernels ran on communicators whose size the export does not hold (their "
                "ncclCommInitRank range is outside the trace): all-gather, reduce-scatter and all-to-all sizes unknown"]
    return []


def _kernel_dtype(name: str) -> str:
    m = _KERNEL_DTYPE.search(name)
    return _DTYPES.get(m.group(1), "Byte") if m else "Byte"


def _per_name(names: np.ndarray, fn) -> np.ndarray:
    """fn of each name, computed once per distinct name."""
    if len(names) == 0:
        return np.zeros(0, dtype=object)
    from analyzers.io.nsys_tables import distinct_strings

    codes, uniques = distinct_strings(names)
    return np.asarray([fn(str(u)) for u in uniques], dtype=object)[codes]
