"""AG+GEMM `tuned`: the candidate schedules its search chooses from, and how each one runs.

All pipelined candidates compute the local rows first: their GEMM needs no communication and
hides the peers' rows, which arrive on a high-priority comm stream in `chunks` pieces; each
chunk's GEMM waits only for its own chunk. The dimensions searched, and the findings behind them:

- transport "ce" (copy engine from symmetric memory, no SM taken from the GEMM) or "nccl"
  (all-gathers): `comm-starved-by-compute` on NCCL kernels beside an SM-filling GEMM, while at
  small blocks the copies' fixed cost can lose.
- barrier "gate" or "none": the local GEMM fills every SM, so a comm kernel not dispatched
  before it waits for its tail (1.3 ms, seen in 1 step in 3). With "gate" the GEMM waits on a
  short kernel of the comm stream and then ~8 µs (`comm_first` GPU cycles), so the
  symmetric-memory barrier goes first; "none" saves those launches where nothing is starved.
- chunks 1/2/4/8, CUDA-graph capture, and "serial" (all-gather, then one GEMM: the baseline
  itself): at shapes where launches dominate (`launch-bound-gaps`), fewer pieces, a replayed
  graph, or no overlap at all win.
- barrier "head": where the gather is short beside the GEMM (4096 x 8192 x 32768: 0.18 ms
  against 3.2 ms), splitting the GEMM into the local rows and the peers' rows cost more than the
  exposed gather (tuned 1.04 x the GEMM alone, `fused-ref` 1.02 x): only a head of the local
  rows (1/chunks of them) runs while the peers' rows arrive, then one GEMM takes every other
  row, local and gathered, from one symmetric buffer that holds A in rank order.
- transport "fused": PyTorch's `fused_all_gather_matmul` itself (the `fused-ref` variant's call), a
  candidate as "serial" is: at shapes where none of the above matches it (4 x H200, 4096 x 8192 x
  32768: tuned 1.03 x `fused-ref` in one cached run), the search picks it, so `tuned` loses to either
  reference only by the timing noise.

The copies are queued after the local GEMM: a host slow to launch them still lands them under it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from runners import symm
from runners.autotune import Schedule
from runners.graphs import capture
from runners.streams import Marker, Streams, region
from runners.workload import Workload

CODE_VERSION = "ag-gemm tuned 5"  # part of the cache fingerprint: bump when a schedule or its timing changes
CHUNKS = (1, 2, 4, 8)
HEADS = (4, 8, 16)  # barrier "head": the local rows computed before the gather ends, as a fraction 1/HEADS
GATE_CYCLES = 1000  # about 0.5 µs on the comm stream: it only marks the point the gate opens


def candidates(wl: Workload) -> list[Schedule]:
    """The search space for this shape on this machine (serial first: the baseline itself)."""
    ctx, rows = wl.ctx, wl.M // wl.D
    graphs = (False, True) if ctx.cuda else (False,)
    out = [Schedule("serial", graph=g) for g in graphs]
    if symm.available(ctx) and wl.D > 1:  # PyTorch's fused op itself, eager (a capture of its barriers is not tried)
        out.append(Schedule("fused"))
    chunks = [s for s in CHUNKS if rows % s == 0]
    if symm.available(ctx) and wl.D > 1:
        out += [Schedule("ce", s, -1, b, g) for s in chunks for b in ("gate", "none") for g in graphs]
        out += [Schedule("ce", s, 0, "gate", g) for s in chunks[2:3] for g in graphs]
        out += [Schedule("ce", s, -1, "head", g) for s in HEADS if rows % s == 0 for g in graphs]
    if wl.D > 1:
        out += [Schedule("nccl", s, -1, "none", g) for s in chunks[1:3] for g in graphs]
    return out


def fixed(wl: Workload) -> Schedule:
    """The schedule the parameters name (tune=off): steps, tuned_comm, comm_priority, comm_first, graph."""
    p, ctx = wl.ctx.params, wl.ctx
    graph = bool(p["graph"]) and ctx.cuda
    if wl.D == 1:
        return Schedule("serial", graph=graph)
    mode = symm.transport(ctx, str(p["tuned_comm"]), "nccl")
    gate = "gate" if mode == "ce" and int(p["comm_first"]) > 0 else "none"
    return Schedule(mode, int(p["steps"]), int(p["comm_priority"]), gate, graph)


class TunedAgGemm:
    """Builds any candidate over buffers shared by all of them (one symmetric allocation per shape)."""

    def __init__(self, wl: Workload) -> None:
        self.wl = wl
        ctx = wl.ctx
        self.rows = wl.M // wl.D
        self.c = torch.empty(wl.D, self.rows, wl.N, device=ctx.device, dtype=ctx.dtype)  # rank-major
        self.peer_a = torch.empty(wl.D, self.rows, wl.K, device=ctx.device, dtype=ctx.dtype)
        self._a_sym: tuple[Any, torch.Tensor, Any] | None = None
        self._serial: tuple[torch.Tensor, torch.Tensor] | None = None
        self.calls = [0]

    def build(self, s: Schedule) -> Callable[[], Any]:
        if s.transport == "fused":
            return self.wl.variant_fn("fused-ref")
        if s.transport == "serial":
            step = self._serial_step
        else:
            step = self._head(s) if s.barrier == "head" else self._pipelined(s)
        if s.graph:
            return capture(self.wl.ctx, lambda _par: step(), 1)
        return step

    def _serial_step(self) -> torch.Tensor:
        wl = self.wl
        if self._serial is None:
            self._serial = (torch.empty_like(wl.full), torch.empty_like(wl.c_base))
        full, c = self._serial
        with region("tuned serial: all_gather"):
            dist.all_gather_into_tensor(full, wl.a_local.view(-1, wl.K), group=wl.ctx.group)
        with region("tuned serial: matmul"):
            torch.matmul(full, wl.b, out=c)
        return wl.canonical_rank_major(c)

    def _symmetric_a(self) -> tuple[Any, torch.Tensor, Any]:
        """A's producer writes straight into symmetric memory; peers read it with copies."""
        if self._a_sym is None:
            handle, a_sym, remote = symm.scratch(self.wl.ctx, (self.rows, self.wl.K), "ag-gemm A")
            a_sym.copy_(self.wl.a_local.view(self.rows, self.wl.K))
            self._a_sym = (handle, a_sym, remote)
        return self._a_sym

    def _pipelined(self, sched: Schedule) -> Callable[[], torch.Tensor]:
        wl, ctx = self.wl, self.wl.ctx
        S, D, K, N, r = sched.chunks, wl.D, wl.K, wl.N, ctx.rank
        m = self.rows // S
        comm = Streams(ctx, 1, priority=sched.priority)
        peers = [(r + j) % D for j in range(1, D)]
        c = self.c.view(D, S, m, N)
        marks = [Marker(ctx) for _ in range(S)]
        ce = sched.transport == "ce"
        if ce:
            handle, a_sym, remote_of = self._symmetric_a()
            remote = self.peer_a.view(D, S, m, K)
            peer_views = {q: remote_of(q).view(S, m, K) for q in peers}
            local_a = a_sym
        else:
            gathered = self.peer_a.view(S, D, m, K)
            local_a = wl.a_local.view(self.rows, K)
            works: list[Any] = []

        def src(q: int, s: int) -> torch.Tensor:
            return remote[q, s] if ce else gathered[s, q]

        def communicate() -> None:
            for s in range(S):
                if ce:
                    with region(f"tuned: copy chunk {s}"):
                        for q in peers:
                            remote[q, s].copy_(peer_views[q][s])
                else:
                    with region(f"tuned: all_gather chunk {s}"):
                        # on CUDA the collective runs on the comm stream; gloo runs it async
                        w = dist.all_gather_into_tensor(gathered[s].view(D * m, K),
                                                        local_a.view(S, m, K)[s], group=ctx.group,
                                                        async_op=not ctx.cuda)
                    works.append(w)
                marks[s].record()

        a_ready, comm_gate = Marker(ctx), Marker(ctx)
        gate = sched.barrier == "gate" and ctx.cuda
        gemm_delay = int(ctx.params["comm_first"]) if gate else 0

        def local_rows() -> None:
            with region("tuned: local rows"):
                torch.matmul(local_a.view(self.rows, K), wl.b, out=c[r].view(self.rows, N))

        def run() -> torch.Tensor:
            a_ready.record()  # A may have been produced on the main stream
            with comm.on(0):
                a_ready.wait()
                if gate:
                    torch.cuda._sleep(GATE_CYCLES)
                    comm_gate.record()
                if ce:  # one barrier per iteration: peers' A is written, and they finished reading ours
                    handle.barrier(channel=0)
            if ctx.cuda:
                if gate:  # the barrier is dispatched before the GEMM takes every SM
                    comm_gate.wait()
                    if gemm_delay:
                        torch.cuda._sleep(gemm_delay)
                local_rows()  # queued before the transfers: a slow host still lands them under it
            with comm.on(0):
                communicate()
            if not ctx.cuda:
                local_rows()  # gloo: the async all-gathers run while the host computes
            for s in range(S):
                marks[s].wait()
                if not ce and not ctx.cuda:
                    works[s].wait()  # gloo: the host waits for chunk s only
                with region(f"tuned: peer rows chunk {s}"):
                    for q in peers:
                        torch.matmul(src(q, s), wl.b, out=c[q, s])
            comm.main_waits(0)
            if not ce:
                works.clear()
            return wl.canonical_rank_major(self.c.view(D * self.rows, N))

        return run

    def _head(self, sched: Schedule) -> Callable[[], torch.Tensor]:
        """A head of the local rows while the peers' rows arrive, then one GEMM over all the others."""
        wl, ctx = self.wl, self.wl.ctx
        S, D, K, N, r, rows = sched.chunks, wl.D, wl.K, wl.N, ctx.rank, self.rows
        handle, a_all, remote_of = symm.scratch(ctx, (D, rows, K), "ag-gemm A in rank order")
        a_all[r].copy_(wl.a_local.view(rows, K))  # A's producer writes its rows straight in
        flat_a, c = a_all.view(D * rows, K), self.c.view(D * rows, N)
        peers = [(r + j) % D for j in range(1, D)]
        views = {q: remote_of(q)[q] for q in peers}
        lo, hi = r * rows, (r + 1) * rows
        head = (lo, lo + rows // S) if r < D - 1 else (hi - rows // S, hi)  # at an edge: the rest is one range
        rest = [(a, b) for a, b in ((0, head[0]), (head[1], D * rows)) if b > a]
        comm = Streams(ctx, 1, priority=sched.priority)
        a_ready, arrived = Marker(ctx), Marker(ctx)

        def run() -> torch.Tensor:
            a_ready.record()
            with comm.on(0):
                a_ready.wait()
                handle.barrier(channel=0)  # peers' rows are written, and they finished reading ours
            with region("tuned: local head rows"):
                torch.matmul(flat_a[head[0]:head[1]], wl.b, out=c[head[0]:head[1]])
            with comm.on(0):
                for q in peers:
                    with region(f"tuned: copy rows of rank {q}"):
                        a_all[q].copy_(views[q])
                arrived.record()
            arrived.wait()
            for a, b in rest:
                with region(f"tuned: rows {a}..{b - 1}"):
                    torch.matmul(flat_a[a:b], wl.b, out=c[a:b])
            comm.main_waits(0)
            return wl.canonical_rank_major(c)

        return run


builder = TunedAgGemm  # what runners.tuning.choose builds candidates with
