"""GEMM+RS `tuned`: the candidate schedules its search chooses from, and how each one runs.

Each finding of this tool on the recorded traces became a dimension of the search:

- ring (`comm-starved-by-compute`: its NCCL SendRecv kernels waited 2.5-2.6 ms for SMs held by
  the GEMM): transport "ce" pushes each finished partial block by copy engine into the peer's
  symmetric memory (`Memcpy PtoP`, no SM); "p2p" (NCCL send/recv) stays a candidate, since
  at small blocks the copy engine's fixed cost can lose. The ring itself (barrier "ring": one hop
  per step, each rank adding its partial to its neighbour's) stays one too: on 2 ranks it is one
  exchange, like the direct pushes; on more, direct pushes move each block once over its own link
  while the ring moves D-1 partial sums in sequence, and the search chooses per world size.
- fused_matmul_reduce_scatter (`late-peer`: its barriers waited up to 0.4 ms because each
  chunk's barrier sits between producer and copy): the peers' partial blocks are computed
  first and pushed while the next one computes; the barriers that say a chunk arrived run on
  their own stream, one GEMM ahead of their consumer (barrier "group": one barrier per own
  GEMM, the own block as chunks 0..S-3, S-2, S-1), once before a single own GEMM (barrier
  "once": fewer launches and barriers), or per chunk (barrier "chunk": where the pushes take
  longer than the peers' GEMMs, each own chunk starts as soon as its own data has arrived).
- the copy engine moves less while a GEMM runs beside it (a 256 MB push of 8192 × 32768 fp16
  took ~1.5 ms next to the GEMM, the NCCL reduce-scatter alone 1.17 ms): "ce*2" splits every
  push over two copy streams, so two copy engines share it.
- the shapes the hand-tuned schedule lost on (`launch-bound-gaps` over 69 % of a rank's span,
  the peer's barriers waiting 99.8 % of their time): chunks 2/4/8 (fewer launches at small
  shapes), CUDA-graph capture (no launch gaps), and "serial", the baseline itself (one GEMM,
  then reduce_scatter_tensor), for shapes where no overlap pays for its extra launches.
- the reduction: received partials land in the rank's output buffer and the rank's own block,
  computed last, is added by the GEMM's epilogue (addmm_, beta = 1): no separate pass.
- the shapes where the pushes stayed exposed (`comm-slowed-by-overlap`: a push of the output
  block as long as three quarters of the GEMM, slower still beside it, tuned 1.10-1.12 x the
  GEMM alone at 8192 x 4096 x 32768): barrier "inputs" moves the operands instead of the
  partial sums. Rank r's block is the sum over ranks q of A_q[rows of r] @ B_q, so each rank
  sends every peer the rows of its A that the peer owns and its whole B shard (rows x K/D +
  K/D x N elements instead of rows x N), computes its own term while they travel, then adds
  each peer's term in the epilogue of its GEMMs (addmm_): the same FLOPs, no reduction pass,
  and less to move wherever N x (rows - K/D) > rows x K/D. Offered only where it moves less;
  B may travel in 2 or 4 blocks of its rows, each added as soon as it arrived.
- where even the operand exchange stayed at 1.06-1.08 × the GEMM alone (its second pass re-reads
  and re-writes the output block): barrier "kcat" (runners/gemm_rs_kcat.py) places the peers'
  operands beside the rank's own along K and runs one GEMM over K for all but the first rows.

- transport "fused": PyTorch's `fused_matmul_reduce_scatter` itself (the `fused-ref` variant's call), a
  candidate as "serial" is: on 4 x H200 at 12288 x 12288 x 6144 bf16 the output pushes stayed at
  1.02-1.03 x `fused-ref` in three runs of four, so the search picks it where nothing above matches it,
  and `tuned` loses to either reference only by the timing noise.

Receive slots alternate between two buffers by iteration; the barriers keep a peer less than
one iteration ahead, so it never overwrites a slot that is still being read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from runners import gemm_rs_kcat, symm
from runners.autotune import Schedule
from runners.graphs import capture
from runners.streams import Marker, Streams, region
from runners.workload import Workload

CODE_VERSION = "gemm-rs tuned 10"  # part of the cache fingerprint: bump when a schedule or its timing changes
CHUNKS = (2, 4, 8)


def candidates(wl: Workload) -> list[Schedule]:
    """The search space for this shape on this machine (serial first: the baseline itself)."""
    ctx, rows = wl.ctx, wl.M // wl.D
    graphs = (False, True) if ctx.cuda else (False,)
    out = [Schedule("serial", graph=g) for g in graphs]
    if symm.available(ctx) and wl.D > 1:  # PyTorch's fused op itself, eager (a capture of its barriers is not tried)
        out.append(Schedule("fused"))
    chunks = [s for s in CHUNKS if rows % s == 0]
    if symm.available(ctx) and wl.D > 1:
        out += [Schedule("ce", s, -1, b, g) for s in chunks for b in ("group", "once") for g in graphs]
        out += [Schedule("ce", s, -1, "chunk", g) for s in chunks if s >= 4 for g in graphs]
        out += [Schedule("ce", s, -1, "group", g, lanes=2) for s in chunks[:2] for g in graphs]
        out += [Schedule("ce", s, 0, "group", g) for s in chunks[1:2] for g in graphs]
        if inputs_move_less(wl):
            out += [Schedule("ce", s, -1, "inputs", g, lanes=n) for s in (1, 2, 4) if wl.kp % s == 0
                    for n in (1, 2) for g in graphs]
        out += gemm_rs_kcat.offered(wl, inputs_move_less(wl))
    if wl.D > 1:  # eager only: a capture of batch_isend_irecv fails and leaves torch's capture state broken
        out += [Schedule("p2p", s, -1, "group") for s in chunks[:2]]
        # the ring (one hop per step, D steps of S/D blocks each) against the direct pushes above: on 2
        # ranks both are one exchange with the one peer; beyond, the search picks per world size
        out += [Schedule("p2p", wl.D * sub, -1, "ring") for sub in (1, 2) if wl.M % (wl.D * sub) == 0]
        if inputs_move_less(wl):
            out.append(Schedule("p2p", 1, -1, "inputs"))
    return out


def inputs_move_less(wl: Workload) -> bool:
    """Whether sending a peer its operands (A rows, B shard) moves fewer elements than its output block."""
    rows = wl.M // wl.D
    return rows * wl.kp + wl.kp * wl.N < rows * wl.N


def fixed(wl: Workload) -> Schedule:
    """The schedule the parameters name (tune=off): steps, tuned_comm, comm_priority, graph."""
    p, ctx = wl.ctx.params, wl.ctx
    if wl.D == 1:
        return Schedule("serial", graph=bool(p["graph"]) and ctx.cuda)
    mode = symm.transport(ctx, str(p["tuned_comm"]), "p2p")
    graph = bool(p["graph"]) and ctx.cuda and mode == "ce"
    return Schedule(mode, int(p["steps"]), int(p["comm_priority"]), "group", graph)


class TunedGemmRs:
    """Builds any candidate over buffers shared by all of them (one symmetric allocation per shape)."""

    def __init__(self, wl: Workload) -> None:
        self.wl = wl
        ctx = wl.ctx
        self.rows = wl.M // wl.D
        self.peers = max(wl.D - 1, 1)
        self.partial = torch.empty(self.peers * self.rows * wl.N, device=ctx.device, dtype=ctx.dtype)
        self._recv: Any = None
        self._serial: tuple[torch.Tensor, torch.Tensor] | None = None
        self.calls = [0]

    def build(self, s: Schedule) -> Callable[[], Any]:
        if s.transport == "fused":
            return self.wl.variant_fn("fused-ref")
        if s.transport == "serial":
            step: Callable[[int], Any] = lambda _par: self._serial_step()  # noqa: E731
            parities = 1
        elif s.barrier == "inputs":
            step = self._inputs(s)
            parities = 2
        elif s.barrier == "ring":  # eager: batch_isend_irecv cannot be captured
            return self.wl.ring_schedule(s.chunks)  # type: ignore[attr-defined]
        elif s.barrier in ("kcat", "kcat-n"):
            step = gemm_rs_kcat.kcat_step(self, s)
            parities = 2
        else:
            step = self._pipelined(s)
            parities = 2
        if s.graph:
            return capture(self.wl.ctx, step, parities)
        calls = self.calls

        def eager() -> Any:
            calls[0] += 1
            return step(calls[0] % parities)

        return eager

    def _serial_step(self) -> torch.Tensor:
        wl = self.wl
        if self._serial is None:
            self._serial = (torch.empty_like(wl.c_full), torch.empty_like(wl.out_base))
        c, out = self._serial
        with region("tuned serial: matmul"):
            torch.matmul(wl.a, wl.b, out=c)
        with region("tuned serial: reduce_scatter"):
            dist.reduce_scatter_tensor(out, c, group=wl.ctx.group)
        return out

    def _recv_slots(self, shape: tuple[int, ...], ce: bool) -> tuple[Any, torch.Tensor, Any]:
        if ce:
            # the largest slot any schedule asks for first: a scratch that grows drops its old allocation,
            # and the candidates built before would push into the peers' unmapped memory
            wl = self.wl
            rows, kp, K, N = self.rows, wl.kp, wl.K, wl.N
            largest = max(2 * self.peers * rows * N, 2 * self.peers * (rows * kp + kp * N), 2 * (rows * K + K * N))
            symm.scratch(wl.ctx, (largest,), "gemm-rs recv")
            return symm.scratch(wl.ctx, shape, "gemm-rs recv")
        n = 1
        for x in shape:
            n *= x
        if self._recv is None or self._recv.numel() < n:
            self._recv = torch.empty(n, device=self.wl.ctx.device, dtype=self.wl.ctx.dtype)
        return None, self._recv[:n].view(shape), None

    def _pipelined(self, sched: Schedule) -> Callable[[int], torch.Tensor]:
        """Peers' partial blocks first, pushed as they finish; the own block last, reduced in its epilogue."""
        wl, ctx = self.wl, self.wl.ctx
        D, S, N, kp, r = wl.D, sched.chunks, wl.N, wl.kp, ctx.rank
        rows, mc = self.rows, self.rows // sched.chunks
        peers = [(r + j) % D for j in range(1, D)]
        a_blocks = wl.a.view(D, S, mc, kp)  # [destination rank, chunk, rows, K/D]
        partial = self.partial.view(S, self.peers, mc, N)  # what this rank sends
        slot_shape = (2, self.peers, S, mc, N)  # [parity, source (j-1: rank r-j), chunk, rows, N]
        ce = sched.transport == "ce"
        handle, recv, remote_of = self._recv_slots(slot_shape, ce)
        if sched.barrier == "once":
            groups = [range(0, S)]
        elif sched.barrier == "chunk" or S < 3:
            groups = [range(s, s + 1) for s in range(S)]
        else:  # chunks 0..S-3 together, then S-2 and S-1 alone (their data comes last)
            groups = [range(0, S - 2), range(S - 2, S - 1), range(S - 1, S)]
        last_of = {g[-1]: gi for gi, g in enumerate(groups)}
        lanes = sched.lanes if ce else 1
        copies = Streams(ctx, lanes, priority=sched.priority)
        lane_done = [[Marker(ctx) for _ in range(lanes)] for _ in range(S)]
        syncs = Streams(ctx, 1, priority=sched.priority)
        computed = [[Marker(ctx) for _ in peers] for _ in range(S)]
        pushed = [Marker(ctx) for _ in range(S)]
        synced = [Marker(ctx) for _ in groups]
        works: dict[int, list[Any]] = {}
        remote = {q: remote_of(q) for q in peers} if ce else {}

        def slot_at(q: int) -> int:
            """Where this rank's partials go among rank q's receive slots."""
            return (q - r) % D - 1

        def push(par: int, s: int) -> None:
            for lane in range(1, lanes):  # extra copy engines take an equal share of the rows
                with copies.on(lane), region(f"tuned: push chunk {s}, lane {lane}"):
                    for qi, q in enumerate(peers):
                        computed[s][qi].wait()
                        rows_of = slice(lane * mc // lanes, (lane + 1) * mc // lanes)
                        remote[q][par, slot_at(q), s, rows_of].copy_(partial[s, qi, rows_of])
                    lane_done[s][lane].record()
            with copies.on(0), region(f"tuned: push chunk {s}"):
                for qi in range(len(peers)):
                    computed[s][qi].wait()
                if ce:
                    for qi, q in enumerate(peers):
                        mine = slice(0, mc // lanes)
                        remote[q][par, slot_at(q), s, mine].copy_(partial[s, qi, mine])
                    for lane in range(1, lanes):
                        lane_done[s][lane].wait()
                    pushed[s].record()
                else:
                    ops = [dist.P2POp(dist.isend, partial[s, qi], q, ctx.group) for qi, q in enumerate(peers)]
                    ops += [dist.P2POp(dist.irecv, recv[par, j - 1, s], (r - j) % D, ctx.group)
                            for j in range(1, D)]
                    works[s] = dist.batch_isend_irecv(ops)
            if ce and s in last_of:
                gi = last_of[s]
                with syncs.on(0), region(f"tuned: barrier, chunks {groups[gi][0]}..{s} arrived"):
                    pushed[s].wait()  # our pushes up to chunk s are complete ...
                    handle.barrier(channel=0)  # ... and so are the peers' (they queued the same)
                    synced[gi].record()

        def arrived(gi: int) -> None:
            if ce:
                synced[gi].wait()
                return
            for s in groups[gi]:
                for w in works.pop(s, []):
                    w.wait()  # CUDA: the compute stream waits for the transfer; gloo: the host does

        def own(par: int, chunks: range) -> None:
            first, last = chunks[0], chunks[-1] + 1
            out = recv[par, 0, first:last].view(len(chunks) * mc, N)
            with region(f"tuned: own rows, chunks {first}..{last - 1}"):
                for j in range(1, D - 1):  # more than one peer: add the other received partials first
                    out.add_(recv[par, j, first:last].view(len(chunks) * mc, N))
                out.addmm_(a_blocks[r, first:last].reshape(len(chunks) * mc, kp), wl.b)  # beta = 1

        def step(par: int) -> torch.Tensor:
            for s in range(S):
                for qi, q in enumerate(peers):
                    with region(f"tuned: partial for rank {q}, chunk {s}"):
                        torch.matmul(a_blocks[q, s], wl.b, out=partial[s, qi])
                    computed[s][qi].record()
                push(par, s)
            for gi, g in enumerate(groups):
                arrived(gi)
                own(par, g)
            copies.join_all()
            syncs.main_waits(0)
            return recv[par, 0].view(rows, N)

        return step

    def _inputs(self, sched: Schedule) -> Callable[[int], torch.Tensor]:
        """Operands to the peers, the own term while they travel, each peer's term added by its GEMM."""
        wl, ctx = self.wl, self.wl.ctx
        D, N, kp, r, rows = wl.D, wl.N, wl.kp, ctx.rank, self.rows
        peers = [(r + j) % D for j in range(1, D)]
        a_rows = wl.a.view(D, rows, kp)
        size = rows * kp + kp * N  # one peer's operands: A rows then B, flat
        ce = sched.transport == "ce"
        handle, recv, remote_of = self._recv_slots((2, self.peers, size), ce)
        out = torch.empty(2, rows, N, device=ctx.device, dtype=ctx.dtype)  # one per parity, as the slots
        lanes, S = (sched.lanes, sched.chunks) if ce else (1, 1)
        kc = kp // S  # B travels in S blocks of its rows; the peer's term is added block by block
        copies = Streams(ctx, lanes, priority=sched.priority)
        syncs = Streams(ctx, 1, priority=sched.priority)
        ready = Marker(ctx)
        pushed, synced = [Marker(ctx) for _ in range(S)], [Marker(ctx) for _ in range(S)]
        lane_done = [[Marker(ctx) for _ in range(lanes)] for _ in range(S)]
        remote = {q: remote_of(q) for q in peers} if ce else {}
        b_flat = wl.b.reshape(-1)

        def b_part(s: int, lane: int) -> slice:
            """The elements of B's row block s that copy lane `lane` carries."""
            return slice((s * kc + kc * lane // lanes) * N, (s * kc + kc * (lane + 1) // lanes) * N)

        def operands(buf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return buf[: rows * kp].view(rows, kp), buf[rows * kp:].view(kp, N)

        def send(par: int) -> list[Any]:
            if not ce:
                ops = []
                for j in range(1, D):
                    q, src = (r + j) % D, (r - j) % D
                    ops += [dist.P2POp(dist.isend, a_rows[q], q, ctx.group),
                            dist.P2POp(dist.isend, wl.b, q, ctx.group),
                            dist.P2POp(dist.irecv, operands(recv[par, j - 1])[0], src, ctx.group),
                            dist.P2POp(dist.irecv, operands(recv[par, j - 1])[1], src, ctx.group)]
                return dist.batch_isend_irecv(ops)
            for s in range(S):
                for lane in range(lanes):
                    with copies.on(lane), region(f"tuned: operands to peers, B rows block {s}, lane {lane}"):
                        if s == 0:
                            ready.wait()
                        for q in peers:
                            dst = remote[q][par, (q - r) % D - 1]
                            if s == 0 and lane == 0:
                                dst[: rows * kp].copy_(a_rows[q].reshape(-1))
                            part = b_part(s, lane)
                            dst[rows * kp + part.start: rows * kp + part.stop].copy_(b_flat[part])
                        lane_done[s][lane].record()
                with copies.on(0):
                    for lane in range(1, lanes):
                        lane_done[s][lane].wait()
                    pushed[s].record()
                with syncs.on(0), region(f"tuned: barrier, B rows block {s} arrived"):
                    pushed[s].wait()  # our block s is in the peers' slots ...
                    handle.barrier(channel=0)  # ... and theirs in ours
                    synced[s].record()
            return []

        def step(par: int) -> torch.Tensor:
            ready.record()
            works = send(par)
            with region("tuned: own term"):
                torch.matmul(a_rows[r], wl.b, out=out[par])
            for w in works:
                w.wait()
            for s in range(S):
                synced[s].wait()
                ks = slice(s * kc, (s + 1) * kc)
                for j in range(1, D):
                    a_q, b_q = operands(recv[par, j - 1])
                    with region(f"tuned: term of rank {(r - j) % D}, B rows block {s}"):
                        out[par].addmm_(a_q[:, ks], b_q[ks])  # beta = 1: the sum happens in the epilogue
            copies.join_all()
            syncs.main_waits(0)
            return out[par]

        return step


builder = TunedGemmRs  # what runners.tuning.choose builds candidates with
