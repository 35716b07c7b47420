"""PyTorch's Execution Trace (``torch.profiler.ExecutionTraceObserver``): which op reads what a collective wrote.

An Execution Trace is a JSON document ``{"schema": ..., "pid": ..., "nodes": [...]}`` whose nodes are the
operators one process ran, in the order they started (``id``), each with its parent (``ctrl_deps``), its
thread (attribute ``tid``) and its ``inputs`` / ``outputs``: values with types, a tensor being
``[tensor id, storage id, offset, elements, bytes per element, device]`` (offset in elements). Recorded
beside a Kineto trace of the same steps (runners/profiling.py), it names the data a trace only implies:

- a collective's *consumer*: the first op after it (by id) that reads a byte of the storage the collective
  wrote (an op that also writes that storage, an in-place op or a view, is no reader), before the storage
  is allocated again or written by another collective; where that op is a copy (FSDP's copy-out, a
  ``split_with_sizes_copy``, ``copy_``, ``cat``), it is the collective's *copy-out* and the first reader of
  what it wrote is followed instead, at most ``MAX_COPY_HOPS`` copies deep;
- a collective's *producer*: the last op before it that wrote (not only viewed) the bytes it reads, other
  than the bytes it writes in place (an all-gather's input shard: FSDP's copy-in, which sits inside the
  output buffer), climbed to the outermost op that wrote them (``fsdp::all_gather_copy_in``, not its
  ``copy_``). An op writes what its outputs hold and the arguments its schema marks ``(a!)``.

Ops are named by (name, k): the k-th op of that name in the process, by id; the Kineto trace's host ops are
numbered the same way by start (analyzers/graph/et_roles.py maps them onto GPU activities). Reading is
bounded like every reader's (input_limits: size, gzip ratio, node count); what is not an Execution Trace
is refused in one line naming the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from analyzers.errors import BadInputError
from analyzers.io.input_limits import InputLimitError, check_event_count, json_problem
from analyzers.io.kineto import rank_from_filename
from analyzers.io.trace_bytes import read_bytes

MAX_COPY_HOPS = 3  # copies followed from a collective's output to the op that computes on it
COLLECTIVE_OP = re.compile(r"^(?:c10d|_c10d_functional|c10d_functional)::(?!(?:monitored_)?barrier)")
GATHER_OP = re.compile(r"all_?gather|broadcast", re.I)  # collectives whose input the step does not compute
COPY_OP = re.compile(r"copy|split_with_sizes|^aten::(?:cat|clone|contiguous|_to_copy|to)$|^fsdp::", re.I)
COMM_INTERNAL = re.compile(r"^(?:gloo|nccl|ucc|mpi):|record_param_comms")  # a collective's own work, no reader
VIEW_OP = re.compile(r"^aten::(?:view|_?reshape|as_strided|narrow|slice|select|chunk|split|unbind|expand|t|"
                     r"transpose|permute|alias|detach|resolve_conj|resolve_neg|unsqueeze|squeeze|flatten|"
                     r"_unsafe_view|unflatten|lift_fresh)(?:\.|$)")


class _Io(msgspec.Struct, gc=False):
    values: list[Any] = []
    types: list[str] = []


class _Attr(msgspec.Struct, gc=False):
    name: str = ""
    value: Any = None


class _Node(msgspec.Struct, gc=False):
    id: int
    name: str
    ctrl_deps: int = -1
    inputs: _Io = msgspec.field(default_factory=_Io)
    outputs: _Io = msgspec.field(default_factory=_Io)
    attrs: list[_Attr] = []


class _Doc(msgspec.Struct, gc=False):
    schema: str
    nodes: list[_Node]
    pid: int = -1


class _SchemaOnly(msgspec.Struct):
    schema: str = ""


_DECODER = msgspec.json.Decoder(_Doc)
_SCHEMA_ONLY = msgspec.json.Decoder(_SchemaOnly)


@dataclass(frozen=True)
class EtLink:
    """One collective occurrence and the ops the Execution Trace ties to it (each (name, k), or None)."""

    collective: tuple[str, int]
    gather: bool  # an all-gather or broadcast (its input is not computed by the step)
    producer: tuple[str, int] | None
    copy_outs: tuple[tuple[str, int], ...]
    consumer: tuple[str, int] | None


@dataclass(frozen=True)
class ExecTrace:
    """What `whatif --et` keeps of one Execution Trace: small, picklable (it travels to the per-rank workers)."""

    path: str
    rank: int | None  # from the file name (rank3.et.json.gz), None if it names none
    pid: int
    n_nodes: int
    links: tuple[EtLink, ...] = field(default_factory=tuple)
    counts: dict[str, int] = field(default_factory=dict)  # ops of each name the links use, in the whole file

    @property
    def n_consumers(self) -> int:
        return sum(lk.consumer is not None for lk in self.links)


def _tensors(values: list[Any], types: list[str]) -> list[tuple[int, int, int]]:
    """(storage id, first byte, end byte) of every tensor among an op's values (lists of tensors included)."""
    out: list[tuple[int, int, int]] = []
    for v, t in zip(values, types, strict=False):
        if t.startswith("Tensor"):
            vs = [v]
        elif t.startswith("GenericList[Tensor"):
            vs = v if isinstance(v, list) else []
        else:
            continue
        for x in vs:
            if isinstance(x, list) and len(x) >= 5 and all(isinstance(y, int) for y in x[1:5]) and x[4] > 0:
                out.append((x[1], x[2] * x[4], (x[2] + x[3]) * x[4]))
    return out


def _decode(path: Path) -> _Doc:
    data = read_bytes(path)
    if not len(data) or not bytes(data[:64]).lstrip()[:1] == b"{":
        raise BadInputError(path, "not a PyTorch Execution Trace (not a JSON object)")
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        try:
            schema = _SCHEMA_ONLY.decode(data).schema
        except (msgspec.ValidationError, msgspec.DecodeError):
            schema = ""
        what = f"an Execution Trace of schema {schema} this reader does not know" if schema else \
            "not a PyTorch Execution Trace"
        raise BadInputError(path, f"{what} ({exc}; expected schema, pid and nodes with id, name, ctrl_deps and "
                                  "inputs / outputs as {values, types}, as torch 2.1 and later write)") from None
    except msgspec.DecodeError as exc:
        raise BadInputError(path, json_problem(bytes(data[:1 << 20]), str(exc))) from None


def _mutated(schema: str) -> list[bool]:
    """Per argument of an op schema, whether the op writes it (``Tensor(a!)``); the bare ``*`` is no argument."""
    args = schema.partition("(")[2].rpartition(") ->")[0]
    out, depth, cur = [], 0, ""
    for ch in args + ",":
        if ch == "," and depth == 0:
            if cur.strip() and cur.strip() != "*":
                out.append("!" in cur.split()[0] if cur.split() else False)
            cur = ""
            continue
        depth += (ch in "([") - (ch in ")]")
        cur += ch
    return out


def _schema(n: _Node) -> str:
    return next((str(a.value) for a in n.attrs if a.name == "op_schema"), "")


def _refs(nodes: list[_Node]) -> pd.DataFrame:
    """One row per (op, tensor, direction): node index, storage, byte range, out (True: written). An input the
    op's schema marks as written (``out=`` arguments, ``copy_``'s self) is written, not read."""
    rows = []
    for i, n in enumerate(nodes):
        mut = _mutated(_schema(n))
        for k, (v, t) in enumerate(zip(n.inputs.values, n.inputs.types, strict=False)):
            w = k < len(mut) and mut[k]
            rows += [(i, s, lo, hi, w, True) for s, lo, hi in _tensors([v], [t])]
        rows += [(i, s, lo, hi, True, False) for s, lo, hi in _tensors(n.outputs.values, n.outputs.types)]
    return pd.DataFrame(rows, columns=["node", "sid", "lo", "hi", "out", "arg"]).astype(
        {"node": np.int64, "sid": np.int64, "lo": np.int64, "hi": np.int64, "out": bool, "arg": bool})


class _Graph:
    """The decoded nodes by id, with each op's (name, k), ancestry and tensors read and written."""

    def __init__(self, nodes: list[_Node]) -> None:
        nodes = sorted(nodes, key=lambda n: n.id)
        self.nodes = nodes
        self.names = [n.name for n in nodes]
        seen: dict[str, int] = {}
        self.key = []
        for nm in self.names:
            self.key.append((nm, seen.get(nm, 0)))
            seen[nm] = seen.get(nm, 0) + 1
        index = {n.id: i for i, n in enumerate(nodes)}
        # the root names itself as its parent; a parent after its child (not what the observer writes) is cut
        self.parent = np.asarray([p if (p := index.get(n.ctrl_deps, -1)) < i else -1 for i, n in enumerate(nodes)],
                                 dtype=np.int64)
        refs = _refs(nodes)
        self.reads = refs[~refs["out"]]
        self.writes = refs[refs["out"]]
        both = self.reads.merge(self.writes, on=["node", "sid"])
        self.in_place = set(zip(both["node"].tolist(), both["sid"].tolist(), strict=True))  # views, in-place ops
        args = refs[refs["arg"]]
        self.given = set(zip(args["node"].tolist(), args["sid"].tolist(), strict=True))  # storages an op was passed

    def inside(self, i: int, root: int) -> bool:
        p = i
        while p >= 0:
            if p == root:
                return True
            p = int(self.parent[p])
        return False

    def _written(self, i: int) -> pd.DataFrame:
        return self.writes[self.writes["node"] == i]

    def first_reader(self, i: int) -> int:
        """The first op after i, outside it, that reads what i wrote (without writing it), before it is
        allocated again or written by another collective; -1 if none."""
        best = -1
        for sid, lo, hi in self._written(i)[["sid", "lo", "hi"]].itertuples(index=False):
            later = self.reads[(self.reads["sid"] == sid) & (self.reads["node"] > i) & (self.reads["lo"] < hi)
                               & (self.reads["hi"] > lo)]["node"].to_numpy(np.int64)
            w = self.writes[(self.writes["sid"] == sid) & (self.writes["node"] > i)]["node"].to_numpy(np.int64)
            # the storage's next allocation (written, never passed in), or another collective writing it
            ends = [int(x) for x in w if (int(x), int(sid)) not in self.given
                    or (COLLECTIVE_OP.match(self.names[int(x)]) and not self.inside(int(x), i))]
            end = min(ends) if ends else np.iinfo(np.int64).max
            for x in later.tolist():
                if x >= end:
                    break
                if (x, int(sid)) in self.in_place or self.inside(x, i) or COMM_INTERNAL.search(self.names[x]):
                    continue
                if best < 0 or x < best:
                    best = x
                break
        return best

    def producer(self, c: int) -> int:
        """The last op before collective c that wrote (not only viewed) a storage c reads and does not write."""
        best = -1
        mine = self.reads[self.reads["node"] == c]
        out = self.writes[self.writes["node"] == c]
        for sid, lo, hi in mine[["sid", "lo", "hi"]].itertuples(index=False):
            o = out[out["sid"] == sid]
            if ((o["lo"] == lo) & (o["hi"] == hi)).any():  # the very bytes it writes: in place, not an input
                continue
            w = self.writes[(self.writes["sid"] == sid) & (self.writes["node"] < c) & (self.writes["lo"] < hi)
                            & (self.writes["hi"] > lo)]["node"].to_numpy(np.int64)
            w = [int(x) for x in w if not VIEW_OP.match(self.names[int(x)]) and self.names[int(x)] != "aten::empty"
                 and not self.inside(c, int(x))]
            if w:
                x = max(w)
                while self.parent[x] >= 0 and ((int(self.parent[x]), sid) in self.in_place or self._writes_sid(
                        int(self.parent[x]), sid)):
                    x = int(self.parent[x])
                best = max(best, x)
        return best

    def _writes_sid(self, i: int, sid: int) -> bool:
        return bool(((self.writes["node"] == i) & (self.writes["sid"] == sid)).any())

    def outermost_collective(self, i: int) -> bool:
        p = int(self.parent[i])
        while p >= 0:
            if COLLECTIVE_OP.match(self.names[p]):
                return False
            p = int(self.parent[p])
        return True


def _link(g: _Graph, c: int) -> EtLink:
    copy_outs: list[tuple[str, int]] = []
    r = g.first_reader(c)
    hops = 0
    while r >= 0 and COPY_OP.search(g.names[r]) and hops < MAX_COPY_HOPS:
        copy_outs.append(g.key[r])
        r = g.first_reader(r)
        hops += 1
    consumer = g.key[r] if r >= 0 and not COPY_OP.search(g.names[r]) else None
    p = g.producer(c)
    return EtLink(g.key[c], bool(GATHER_OP.search(g.names[c])), g.key[p] if p >= 0 else None, tuple(copy_outs),
                  consumer)


def read_exec_trace(path: Path) -> ExecTrace:
    """The file's collectives with their producers, copy-outs and consumers; BadInputError (one line) on a file
    that is not an Execution Trace or breaks the input limits."""
    doc = _decode(path)
    try:
        check_event_count(len(doc.nodes))
    except InputLimitError as exc:
        raise BadInputError(path, exc.problem) from None
    if not doc.schema or not doc.nodes:
        raise BadInputError(path, "not a PyTorch Execution Trace (no schema or no nodes)")
    if not any(n.name.startswith("[pytorch|profiler|execution_trace|") for n in doc.nodes):
        raise BadInputError(path, "not a PyTorch Execution Trace (no [pytorch|profiler|execution_trace|process] "
                                  "root node)")
    g = _Graph(doc.nodes)
    colls = [i for i, nm in enumerate(g.names) if COLLECTIVE_OP.match(nm) and g.outermost_collective(i)]
    links = tuple(_link(g, c) for c in colls)
    used = {k[0] for lk in links for k in (lk.collective, lk.producer, lk.consumer, *lk.copy_outs) if k}
    return ExecTrace(str(path), rank_from_filename(path), doc.pid, len(doc.nodes), links,
                     {nm: sum(n == nm for n in g.names) for nm in sorted(used)})


def exec_trace_of(traces: tuple[ExecTrace, ...], rank: int) -> ExecTrace | None:
    """The rank's Execution Trace: the one whose file name names the rank (one unnamed file: rank 0's)."""
    return next((e for e in traces if (e.rank if e.rank is not None else 0) == rank), None)


def read_exec_traces(paths: list[Path]) -> tuple[ExecTrace, ...]:
    """Every --et file, read and checked: one per rank, each naming its rank unless there is only one."""
    out = tuple(read_exec_trace(p) for p in paths)
    if len(out) > 1:
        for e in out:
            if e.rank is None:
                raise BadInputError(e.path, "names no rank: with several --et files each must name its rank "
                                            "(rank3.et.json.gz, as the runners write them)")
    seen: dict[int, str] = {}
    for e in out:
        r = e.rank if e.rank is not None else 0
        if r in seen:
            raise BadInputError(e.path, f"a second Execution Trace for rank {r} (the first: {seen[r]})")
        seen[r] = e.path
    return out


def check_exec_ranks(traces: tuple[ExecTrace, ...], ranks: list[int]) -> None:
    """Refuse an Execution Trace of a rank the trace set does not hold."""
    for e in traces:
        r = e.rank if e.rank is not None else 0
        if r not in ranks:
            raise BadInputError(e.path, f"is rank {r}'s Execution Trace, but the traces hold rank(s) "
                                        f"{', '.join(map(str, ranks))}")
