"""GEMM+RS: C = A @ B with K sharded over ranks, then a reduce-scatter of C over rows.

Rank r holds A_r [M, K/D] and B_r [K/D, N]; the result on rank r is rows
[r*M/D, (r+1)*M/D) of sum_r A_r @ B_r, as reduce_scatter_tensor gives it.

The `tuned` schedule came from this tool's findings on the recorded 2×H200 traces
(sample_traces/gemm-rs, sample_traces/symm-mem/fused-matmul-rs):

- ring: `comm-starved-by-compute` on both ranks (its NCCL SendRecv kernels waited
  2.5–2.6 ms in all for SMs held by the nvjet GEMM) and `late-peer`; overlap 0.64 / 0.54
  (session 3's sample; session 6's, now in sample_traces, shows the same finding).
  So: no SM-hungry transfer next to the GEMM. tuned pushes by copy engine (a copy into
  the peer's symmetric memory, `Memcpy PtoP` in the trace), which takes no SM.
- fused_matmul_reduce_scatter: `late-peer`, its symmetric-memory barriers waited up to
  0.4 ms for the other rank, because each chunk's barrier sits between producer and copy
  on the critical path. So: tuned never waits for a peer inside the pipeline. The peers'
  partial blocks are computed first and pushed while the next one computes; the
  barriers that say a chunk has arrived run on their own stream, each ready one GEMM
  before its consumer, so the compute stream only waits where a peer is a whole GEMM late.
- the reduction: the received partials land in the rank's output buffer, and the rank's
  own block, computed last, is added into it by the GEMM's epilogue (addmm_, beta = 1):
  no separate reduction pass.

Run under torchrun:  python -m torch.distributed.run --nproc-per-node 2 -m runners.gemm_rs \
    --variant ring --profiler torch --out out/gemm-rs
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from runners import symm
from runners.context import Ctx
from runners.harness import main
from runners.specs import GEMM_RS
from runners.streams import Marker, Streams, region
from runners.workload import Workload


class GemmRs(Workload):
    def __init__(self, ctx: Ctx, variants: list[str]) -> None:
        super().__init__(ctx)
        p = ctx.params
        self.D, self.S = ctx.world, int(p["steps"])
        self.M, self.K, self.N = int(p["M"]), int(p["K"]), int(p["N"])
        if self.K % self.D:
            raise ValueError(f"K={self.K} must be a multiple of the number of ranks {self.D}")
        if self.M % (self.S * self.D):
            raise ValueError(f"M={self.M} must be a multiple of steps*ranks={self.S * self.D}")
        self.kp = self.K // self.D
        dev, dt = ctx.device, ctx.dtype
        self.a = torch.randn(self.M, self.kp, device=dev, dtype=dt)
        self.b = (torch.randn(self.kp, self.N, device=dev, dtype=torch.float32) / self.K**0.5).to(dt)
        self.c_full = torch.empty(self.M, self.N, device=dev, dtype=dt)
        self.out_base = torch.empty(self.M // self.D, self.N, device=dev, dtype=dt)
        self.streams = Streams(ctx, int(p["streams"]))
        self._fns: dict[str, Callable[[], Any]] = {}
        self._tuned_mode: str | None = None
        self._fallbacks: dict[str, str] = {}
        for v in variants:
            self.variant_fn(v)

    def _cached(self, key: str, make: Callable[[], Callable[[], Any]]) -> Callable[[], Any]:
        if key not in self._fns:
            self._fns[key] = make()
        return self._fns[key]

    # ---------------------------------------------------------------- baseline / alone
    def _baseline(self) -> torch.Tensor:
        with region("gemm-rs baseline: matmul"):
            torch.matmul(self.a, self.b, out=self.c_full)
        with region("gemm-rs baseline: reduce_scatter"):
            dist.reduce_scatter_tensor(self.out_base, self.c_full, group=self.ctx.group)
        return self.out_base

    def _compute_alone(self) -> None:
        torch.matmul(self.a, self.b, out=self.c_full)

    def _comm_alone(self) -> None:
        dist.reduce_scatter_tensor(self.out_base, self.c_full, group=self.ctx.group)

    def baseline_fn(self, variant: str) -> Callable[[], Any]:
        return self._cached("baseline", lambda: self._baseline)

    def compute_fn(self, variant: str) -> Callable[[], Any]:
        return self._cached("compute", lambda: self._compute_alone)

    def comm_fn(self, variant: str) -> Callable[[], Any]:
        return self._cached("comm", lambda: self._comm_alone)

    # ---------------------------------------------------------------- variants
    def variant_fn(self, variant: str) -> Callable[[], Any]:
        makers: dict[str, Callable[[], Callable[[], Any]]] = {
            "baseline": lambda: self._baseline,
            "collective-pipelined": self._make_collective_pipelined,
            "ring": lambda: self._make_ring(coalesced=True),
            "ring-uncoalesced": lambda: self._make_ring(coalesced=False),
            "tuned": self._make_tuned,
            "fused-ref": self._make_fused,
        }
        return self._cached("v:" + variant, makers[variant])

    def _make_collective_pipelined(self) -> Callable[[], torch.Tensor]:
        """Step s: matmul of the rows every rank's s-th output block needs, then reduce-scatter them.

        A's rows are laid out once at setup as [S, D, m] so that step s's rows are
        contiguous and the reduce-scatter hands rank r exactly its s-th block.
        """
        S, D, N = self.S, self.D, self.N
        m = self.M // (S * D)
        a_perm = self.a.view(D, S, m, self.kp).transpose(0, 1).contiguous()  # [S, D, m, K/D]
        partial = torch.empty(S, D * m, N, device=self.ctx.device, dtype=self.ctx.dtype)
        out = torch.empty(S, m, N, device=self.ctx.device, dtype=self.ctx.dtype)
        st, group = self.streams, self.ctx.group

        def run() -> torch.Tensor:
            for i in range(len(st)):
                st.wait_main(i)
            for s in range(S):
                with st.on(s), region(f"gemm-rs step {s}"):
                    torch.matmul(a_perm[s].view(D * m, self.kp), self.b, out=partial[s])
                    dist.reduce_scatter_tensor(out[s], partial[s], group=group)
            st.join_all()
            return out.view(S * m, N)

        return run

    def _make_ring(self, *, coalesced: bool) -> Callable[[], torch.Tensor]:
        """Ring reduce-scatter fused with the matmul, S/D sub-blocks per ring step.

        Ring step j computes the partial for rank c = (r+j+1) % D, adds the partial sum
        the right neighbour (r+1) sent for c, and passes it to the left neighbour (r-1).
        At the last step c == r: the sum is complete and is written into the output.
        """
        D, S, N, r = self.D, self.S, self.N, self.ctx.rank
        if S % D:
            raise ValueError(f"ring: steps={S} must be a multiple of the number of ranks {D}")
        sub = S // D
        mr = self.M // S
        a4 = self.a.view(D, sub, mr, self.kp)
        dev, dt = self.ctx.device, self.ctx.dtype
        partial = torch.empty(max(D - 1, 1), sub, mr, N, device=dev, dtype=dt)
        recv = torch.empty(max(D - 1, 1), sub, mr, N, device=dev, dtype=dt)
        out = torch.empty(sub, mr, N, device=dev, dtype=dt)
        prev, nxt = (r - 1) % D, (r + 1) % D
        st, group = self.streams, self.ctx.group

        def exchange(send_t: torch.Tensor, recv_t: torch.Tensor) -> list[Any]:
            if coalesced:
                return dist.batch_isend_irecv([dist.P2POp(dist.isend, send_t, prev, group),
                                               dist.P2POp(dist.irecv, recv_t, nxt, group)])
            # separate point-to-point calls; parity order so that two ranks never both send first
            if r % 2 == 0:
                return [dist.isend(send_t, prev, group), dist.irecv(recv_t, nxt, group)]
            return [dist.irecv(recv_t, nxt, group), dist.isend(send_t, prev, group)]

        def run() -> torch.Tensor:
            works: dict[tuple[int, int], list[Any]] = {}
            for i in range(len(st)):
                st.wait_main(i)
            for j in range(D):
                c = (r + j + 1) % D
                for i in range(sub):
                    step = j * sub + i
                    with st.on(step), region(f"gemm-rs ring step {j}.{i} (block of rank {c})"):
                        dst = out[i] if j == D - 1 else partial[j, i]
                        torch.matmul(a4[c, i], self.b, out=dst)
                        if j > 0:
                            for w in works.pop((j - 1, i)):
                                w.wait()  # CUDA: this stream waits for the transfer; gloo: the host does
                            dst.add_(recv[j - 1, i])
                        if j < D - 1:
                            works[(j, i)] = exchange(partial[j, i], recv[j, i])
            st.join_all()
            return out.view(sub * mr, N)

        return run

    def _make_tuned(self) -> Callable[[], torch.Tensor]:
        """Peers' partial blocks first, pushed as they finish; the own block last, reduced in its epilogue.

        Each rank's output block of M/D rows is split into S chunks. First, on the compute
        stream: for chunk s = 0..S-1 and every peer q, the partial A_r[q's chunk s] @ B_r;
        as each finishes, a high-priority copy stream pushes it into q's receive slot (copy
        engine into q's symmetric memory; NCCL or gloo point-to-point where that is not
        available). Then the own block, C = received + A_r[own rows] @ B_r, as addmm_ into
        the receive slot itself, in three GEMMs: chunks 0..S-3, S-2, S-1.

        Before each own GEMM, the peers' pushes of its chunks must be complete: a barrier
        on a third (high-priority) stream, queued after this rank's push of the group's last
        chunk. That push ends early in the next GEMM, one GEMM before the barrier's consumer:
        a rank that runs ahead waits for its peer inside the barrier while its own next GEMM
        (which does not need it) computes. On 2×H200 every barrier started as its push ended
        and ran beside a GEMM (the faster rank spun 158–190 µs there); one that found no SM
        until that GEMM's end would still be a GEMM ahead of its consumer. Receive slots
        alternate between two buffers by iteration; the barriers keep a peer less than one
        iteration ahead, so it never overwrites a slot that is still being read.
        """
        ctx, p = self.ctx, self.ctx.params
        D, S, N, kp, r = self.D, self.S, self.N, self.kp, ctx.rank
        rows = self.M // D
        mc = rows // S
        dev, dt = ctx.device, ctx.dtype
        mode = str(p["tuned_comm"])
        if mode in ("auto", "ce"):
            if symm.available(ctx):
                mode = "ce"
            elif mode == "ce" and ctx.cuda:
                raise RuntimeError(f"--tuned-comm ce: symmetric memory unavailable ({symm.why_unavailable(ctx)})")
            else:
                mode = "p2p"
                self._fallbacks["tuned"] = "ce unavailable here: " + symm.why_unavailable(ctx)
        self._tuned_mode = mode
        peers = [(r + j) % D for j in range(1, D)]
        a_blocks = self.a.view(D, S, mc, kp)  # [destination rank, chunk, rows, K/D]
        partial = torch.empty(S, max(D - 1, 1), mc, N, device=dev, dtype=dt)  # what this rank sends
        # receive slots: [iteration parity, source (index j-1 holds rank r-j's partials), chunk, rows, N]
        slot_shape = (2, max(D - 1, 1), S, mc, N)
        # the own block's GEMMs: chunks 0..S-3 together, then S-2 and S-1 alone (their data comes last)
        groups = [range(0, S - 2), range(S - 2, S - 1), range(S - 1, S)] if S >= 3 else [range(s, s + 1)
                                                                                          for s in range(S)]
        last_of = {g[-1]: gi for gi, g in enumerate(groups)}
        copies = Streams(ctx, 1, priority=int(p["comm_priority"]))
        syncs = Streams(ctx, 1, priority=int(p["comm_priority"]))
        computed = [[Marker(ctx) for _ in peers] for _ in range(S)]
        pushed = [Marker(ctx) for _ in range(S)]
        synced = [Marker(ctx) for _ in groups]
        calls = [0]

        def slot_at(q: int) -> int:
            """Where this rank's partials go among rank q's receive slots."""
            return (q - r) % D - 1

        if mode == "ce":
            handle, recv = symm.alloc(ctx, slot_shape)
            remote = {q: handle.get_buffer(q, slot_shape, dt) for q in peers}

            def push(par: int, s: int) -> None:
                with copies.on(0), region(f"tuned: push chunk {s}"):
                    for qi, q in enumerate(peers):
                        computed[s][qi].wait()
                        remote[q][par, slot_at(q), s].copy_(partial[s, qi])
                    pushed[s].record()
                if s in last_of:
                    gi = last_of[s]
                    with syncs.on(0), region(f"tuned: barrier, chunks {groups[gi][0]}..{s} arrived"):
                        pushed[s].wait()  # our pushes up to chunk s are complete ...
                        handle.barrier(channel=0)  # ... and so are the peers' (they queued the same)
                        synced[gi].record()

            def arrived(par: int, gi: int) -> None:
                synced[gi].wait()
        else:
            recv = torch.empty(slot_shape, device=dev, dtype=dt)
            works: dict[int, list[Any]] = {}

            def push(par: int, s: int) -> None:
                with copies.on(0), region(f"tuned: push chunk {s}"):
                    for qi in range(len(peers)):
                        computed[s][qi].wait()
                    ops = [dist.P2POp(dist.isend, partial[s, qi], q, ctx.group) for qi, q in enumerate(peers)]
                    ops += [dist.P2POp(dist.irecv, recv[par, j - 1, s], (r - j) % D, ctx.group)
                            for j in range(1, D)]
                    works[s] = dist.batch_isend_irecv(ops) if ops else []

            def arrived(par: int, gi: int) -> None:
                for s in groups[gi]:
                    for w in works.pop(s, []):
                        w.wait()  # CUDA: the compute stream waits for the transfer; gloo: the host does

        def own(par: int, chunks: range) -> None:
            first, last = chunks[0], chunks[-1] + 1
            out = recv[par, 0, first:last].view(len(chunks) * mc, N)
            with region(f"tuned: own rows, chunks {first}..{last - 1}"):
                for j in range(1, D - 1):  # more than one peer: add the other received partials first
                    out.add_(recv[par, j, first:last].view(len(chunks) * mc, N))
                a_own = a_blocks[r, first:last].reshape(len(chunks) * mc, kp)
                if D == 1:
                    torch.matmul(a_own, self.b, out=out)
                else:
                    out.addmm_(a_own, self.b)  # the reduction rides in the GEMM's epilogue (beta = 1)

        def run() -> torch.Tensor:
            par = calls[0] % 2
            calls[0] += 1
            for s in range(S):
                for qi, q in enumerate(peers):
                    with region(f"tuned: partial for rank {q}, chunk {s}"):
                        torch.matmul(a_blocks[q, s], self.b, out=partial[s, qi])
                    computed[s][qi].record()
                if D > 1:
                    push(par, s)
            for gi, g in enumerate(groups):
                if D > 1:
                    arrived(par, gi)
                own(par, g)
            copies.main_waits(0)
            syncs.main_waits(0)
            return recv[par, 0].view(rows, N)

        return run

    def _make_fused(self) -> Callable[[], torch.Tensor]:
        """PyTorch's fused_matmul_reduce_scatter (CUDA symmetric memory); unfused with gloo."""
        ctx = self.ctx
        if not symm.available(ctx):
            self._fallbacks["fused-ref"] = "fused op unavailable: " + symm.why_unavailable(ctx)
            c, out = torch.empty_like(self.c_full), torch.empty_like(self.out_base)

            def unfused() -> torch.Tensor:
                torch.matmul(self.a, self.b, out=c)
                dist.reduce_scatter_tensor(out, c, group=ctx.group)
                return out

            return unfused
        symm.enable(ctx)
        name = ctx.group.group_name

        def fused() -> torch.Tensor:
            return torch.ops.symm_mem.fused_matmul_reduce_scatter(self.a, self.b, "sum", 0, name)

        return fused

    def describe(self, variant: str) -> dict[str, Any]:
        d: dict[str, Any] = {"M": self.M, "K": self.K, "N": self.N, "K_per_rank": self.kp, "S": self.S,
                             "D": self.D, "streams": len(self.streams)}
        if variant == "tuned":
            d["tuned_comm"] = self._tuned_mode
        if variant in self._fallbacks:
            d["fallback"] = self._fallbacks[variant]
        return d


def build(ctx: Ctx, variants: list[str]) -> GemmRs:
    return GemmRs(ctx, variants)


if __name__ == "__main__":
    main(GEMM_RS, build)
