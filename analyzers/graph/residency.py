"""SM residency: a communication kernel cannot start while a compute kernel holds every SM.

The GPU hands SMs to a kernel's blocks only where they fit beside the blocks already resident. A
GEMM whose blocks sit on every SM (a persistent kernel: one block per SM, most of the registers and
shared memory) leaves no room for one block of an NCCL kernel: a collective made ready while it runs
gets SMs only when the GEMM's blocks retire, in its last microseconds. Traces in which communication
waited for compute (a fork inside the loop, a host sync) never show this; a replay that removes the
wait must, or it predicts communication hidden under a GEMM that the GPU would not let it share.

Per rank (its GPUs' per-SM limits and each kernel's grid, block, registers per thread and shared
memory per block, timeline.sm_resources):

- a compute kernel *fills* the GPU when its grid has at least one block per SM; its resident blocks
  per SM are the fewest of its grid's share and what the limits allow (threads, registers allocated
  per warp in units of 256, shared memory, blocks);
- a communication kernel is *blocked* by it when one of its blocks does not fit in what those resident
  blocks leave of an SM;
- a blocked kernel that becomes ready while such a kernel runs on another stream of its GPU (and was
  launched after it: the replay's order) starts at that kernel's end less its *tail*: the earliest
  such start seen in the trace itself (the blocks that retire first free their SMs a little before the
  kernel's end), 0 where the trace never shows one.

Kernels whose resources the trace does not give are never held back (a note says so where a rank has
both classes).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from analyzers.graph.fixes import ReplayInputs
from analyzers.graph.rank_graph import CAT_CODES
from analyzers.graph.replay import Replay, replay
from analyzers.graph.set_graph import SetGraph
from analyzers.timeline.sm_resources import RES_COLUMNS

REG_UNIT = 256  # registers are allocated per warp in units of this many
WARP = 32
MAX_GATE_ROUNDS = 8  # replays that add gates, at most, per settle
GATE_TOL_NS = 1000  # a start this close to the release is taken as released (replay rounding)


def _block_regs(t: dict[str, np.ndarray]) -> np.ndarray:
    warps = -(-t["block_threads"] // WARP)
    return warps * (-(-(t["thread_regs"] * WARP) // REG_UNIT) * REG_UNIT)


def blocked_matrix(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fills per entry, blocked[x, k]: a block of entry x does not fit beside entry k's resident blocks)."""
    t = {c: table[:, i] for i, c in enumerate(RES_COLUMNS)}
    regs = _block_regs(t)
    with np.errstate(divide="ignore"):
        occ = np.minimum.reduce([
            t["max_blocks"],
            t["threads"] // np.maximum(t["block_threads"], 1),
            np.where(regs > 0, t["regs"] // np.maximum(regs, 1), t["max_blocks"]),
            np.where(t["block_smem"] > 0, t["smem"] // np.maximum(t["block_smem"], 1), t["max_blocks"]),
        ])
    resident = np.minimum(occ, -(-t["blocks"] // t["sms"]))
    fills = (t["blocks"] >= t["sms"]) & (occ >= 1)
    left = {"threads": t["threads"] - resident * t["block_threads"], "regs": t["regs"] - resident * regs,
            "smem": t["smem"] - resident * t["block_smem"], "blocks": t["max_blocks"] - resident}
    fits = ((t["block_threads"][:, None] <= left["threads"][None, :]) & (regs[:, None] <= left["regs"][None, :])
            & (t["block_smem"][:, None] <= left["smem"][None, :]) & (left["blocks"][None, :] >= 1))
    same_device = t["device"][:, None] == t["device"][None, :]
    return fills, same_device & fills[None, :] & ~fits


@dataclass
class Residency:
    """Per node of a set graph: which compute kernels hold every SM, which comm kernels they block."""

    holder: np.ndarray  # per node: a compute kernel that fills its GPU
    tail: np.ndarray  # per node (holders): ns before its end that a blocked kernel may start
    res: np.ndarray  # per node: its rank's resource entry, -1
    blocked: dict[int, np.ndarray]  # per rank: blocked[x, k] over its entries
    candidate: np.ndarray  # per node: a comm kernel with known resources
    stream: np.ndarray  # per node: its stream code within its rank
    notes: list[str]


def residency(sg: SetGraph) -> Residency:
    """The set's residency facts (cached on the graph)."""
    cached = getattr(sg, "_residency", None)
    if cached is not None:
        return cached
    n = sg.n
    res = np.full(n, -1, dtype=np.int64)
    holder = np.zeros(n, dtype=bool)
    blocked: dict[int, np.ndarray] = {}
    notes: list[str] = []
    unknown = []
    for r in sg.ranks:
        g, b = sg.graphs[r], sg.base[r]
        has_both = (g.cat == CAT_CODES["comm"]).any() and (g.cat == CAT_CODES["compute"]).any()
        rid = g.res_id.astype(np.int64) if len(g.res_id) == g.n else np.full(g.n, -1, dtype=np.int64)
        res[b:b + g.n] = rid
        if not len(g.res) or (rid < 0).all():
            if has_both:
                unknown.append(r)
            continue
        fills, blocked[r] = blocked_matrix(g.res)
        holder[b:b + g.n] = (rid >= 0) & (g.cat == CAT_CODES["compute"]) & fills[np.maximum(rid, 0)]
    if unknown:
        notes.append(f"residency: kernels' grid, registers or shared memory, or the GPU's limits, unknown on "
                     f"{len(unknown)} rank(s): communication is taken to get SMs beside any compute kernel there")
    candidate = (res >= 0) & (sg.cat == CAT_CODES["comm"])
    out = Residency(holder=holder, tail=np.zeros(n, dtype=np.int64), res=res, blocked=blocked, candidate=candidate,
                    notes=notes, stream=np.concatenate([sg.graphs[r].stream for r in sg.ranks]))
    out.tail = _observed_tails(sg, out)
    sg._residency = out  # type: ignore[attr-defined]
    return out


def _running(start: np.ndarray, end: np.ndarray, ks: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each time in at: of the holders ks (sorted by start) that started at or before it, the one that ends
    last (-1 where none started): the one that covers it, if any does."""
    pos = np.searchsorted(start[ks], at, side="right") - 1
    if not len(ks):
        return np.full(len(at), -1, dtype=np.int64)
    e = end[ks]
    idx = np.arange(len(ks))
    latest = np.maximum.accumulate(np.where(e == np.maximum.accumulate(e), idx, 0))  # argmax of end so far
    return np.where(pos >= 0, ks[latest[np.maximum(pos, 0)]], -1)


def _pairs(sg: SetGraph, rs: Residency, start: np.ndarray, end: np.ndarray,
           xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x, k): candidates xs that start inside a holder k they cannot run beside, on another stream."""
    out_x, out_k = [], []
    res, stream = rs.res, rs.stream
    for r, bm in rs.blocked.items():
        b, m = sg.base[r], sg.graphs[r].n
        ks = np.flatnonzero(rs.holder[b:b + m]) + b
        x = xs[(xs >= b) & (xs < b + m)]
        if not len(ks) or not len(x):
            continue
        ks = ks[np.argsort(start[ks], kind="stable")]
        k = _running(start, end, ks, start[x])
        ok = k >= 0
        x, k = x[ok], k[ok]
        ok = (stream[x] != stream[k]) & (start[x] < end[k]) & bm[res[x], res[k]]
        out_x.append(x[ok])
        out_k.append(k[ok])
    if not out_x:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(out_x), np.concatenate(out_k)


def _observed_tails(sg: SetGraph, rs: Residency) -> np.ndarray:
    """Per holder: the most time before its end that a kernel it blocks was seen to start, by its
    rank and name (the same kernel on the same work); 0 where none was."""
    tail = np.zeros(sg.n, dtype=np.int64)
    x, k = _pairs(sg, rs, sg.start, sg.end, np.flatnonzero(rs.candidate))
    inside = sg.start[x] > sg.start[k]
    x, k = x[inside], k[inside]
    if not len(k):
        return tail
    name = np.concatenate([sg.graphs[r].name_id for r in sg.ranks])
    key = sg.rank_of * (1 << 32) + name
    seen = pd.Series(sg.end[k] - sg.start[x]).groupby(key[k]).max()
    hold = np.flatnonzero(rs.holder)
    tail[hold] = pd.Series(key[hold]).map(seen).fillna(0).to_numpy(np.int64)
    return tail


def new_gates(sg: SetGraph, rs: Residency, gate: np.ndarray, start: np.ndarray, end: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """(x, k) for blocked kernels of a replayed timeline that start before holder k releases SMs (its end
    less its tail) and have no gate yet; only where the replay's order puts k first."""
    xs = np.flatnonzero(rs.candidate & (gate < 0))
    x, k = _pairs(sg, rs, start, end, xs)
    ok = (start[x] + GATE_TOL_NS < end[k] - rs.tail[k]) & (sg.order_key[k] < sg.order_key[x])
    return x[ok], k[ok]


def settle_gates(sg: SetGraph, inp: ReplayInputs, rp: Replay, order: np.ndarray | None
                 ) -> tuple[ReplayInputs, Replay, bool]:
    """Replay until no blocked kernel starts inside a holder that came first: each round gates the ones
    that do (they wait for its end less its tail) and replays. Returns the inputs with their gates, the
    replay, and whether it settled within MAX_GATE_ROUNDS."""
    rs = residency(sg)
    if not rs.candidate.any() or not rs.holder.any():
        return inp, rp, True
    for _ in range(MAX_GATE_ROUNDS):
        gate = inp.gate if inp.gate is not None else np.full(sg.n, -1, dtype=np.int64)
        x, k = new_gates(sg, rs, gate, rp.start, rp.end)
        if not len(x):
            return inp, rp, True
        gate = gate.copy()
        lat = inp.gate_lat.copy() if inp.gate_lat is not None else np.zeros(sg.n, dtype=np.int64)
        gate[x], lat[x] = k, -rs.tail[k]
        inp = replace(inp, gate=gate, gate_lat=lat)
        rp = replay(sg, inp, order)
    x, _ = new_gates(sg, rs, inp.gate if inp.gate is not None else np.full(sg.n, -1), rp.start, rp.end)
    return inp, rp, not len(x)
