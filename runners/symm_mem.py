"""Symmetric-memory schedules: communication by copy engine instead of NCCL kernels.

- fused-ag-matmul / fused-matmul-rs: PyTorch's torch.ops.symm_mem fused ops, as references.
- two-stream / two-stream-sleep: matmul + reduce-scatter written out as PyTorch's
  _pipelined_produce_and_all2all does it: each rank produces the partial block a peer
  needs into its own symmetric buffer, a barrier on that stream's channel says it is
  ready, the peer pulls it with a p2p copy, a second barrier frees the buffer. Pieces
  alternate between a backend stream and the main stream. Nothing orders the two
  streams' first producers on the GPU, so ranks can start them in different orders and
  then wait for each other at the barriers; the sleep variant puts a tiny sleep kernel
  on the main stream first, as PyTorch does, so the backend stream's producer wins
  everywhere.

With gloo (no CUDA), the fused ops run their unfused semantics and the two-stream
schedule exchanges the produced blocks with batch_isend_irecv (no streams, no barrier).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from runners import symm
from runners.context import Ctx
from runners.harness import main
from runners.specs import SYMM_MEM
from runners.streams import Streams, region
from runners.workload import Workload

AG_VARIANTS = ("fused-ag-matmul",)


class SymmMem(Workload):
    def __init__(self, ctx: Ctx, variants: list[str]) -> None:
        super().__init__(ctx)
        p = ctx.params
        self.D, self.S = ctx.world, int(p["steps"])
        self.M, self.K, self.N = int(p["M"]), int(p["K"]), int(p["N"])
        if self.M % (self.D * self.S) or self.K % self.D:
            raise ValueError(f"M={self.M} must be a multiple of ranks*steps and K={self.K} of ranks")
        self.ok = symm.available(ctx)
        self.why = symm.why_unavailable(ctx)
        self._fns: dict[str, Callable[[], Any]] = {}
        self._ag_ready = self._rs_ready = False
        for v in variants:
            self.variant_fn(v)

    def _cached(self, key: str, make: Callable[[], Callable[[], Any]]) -> Callable[[], Any]:
        if key not in self._fns:
            self._fns[key] = make()
        return self._fns[key]

    # ---------------------------------------------------------------- operands
    def _need_ag(self) -> None:
        """All-gather + matmul operands: A rows sharded [M/D, K], B [K, N] replicated."""
        if self._ag_ready:
            return
        ctx, dev, dt = self.ctx, self.ctx.device, self.ctx.dtype
        self.ag_a = torch.randn(self.M // self.D, self.K, device=dev, dtype=dt)
        gen = torch.Generator(device="cpu").manual_seed(int(ctx.params["seed"]))
        self.ag_b = (torch.randn(self.K, self.N, generator=gen) / self.K**0.5).to(dev, dt)
        self.ag_full = torch.empty(self.M, self.K, device=dev, dtype=dt)
        self.ag_c = torch.empty(self.M, self.N, device=dev, dtype=dt)
        self._ag_ready = True

    def _need_rs(self) -> None:
        """Matmul + reduce-scatter operands: A [M, K/D] and B [K/D, N] per rank."""
        if self._rs_ready:
            return
        dev, dt = self.ctx.device, self.ctx.dtype
        kp = self.K // self.D
        self.rs_a = torch.randn(self.M, kp, device=dev, dtype=dt)
        self.rs_b = (torch.randn(kp, self.N, device=dev) / self.K**0.5).to(dt)
        self.rs_c = torch.empty(self.M, self.N, device=dev, dtype=dt)
        self.rs_out = torch.empty(self.M // self.D, self.N, device=dev, dtype=dt)
        self._rs_ready = True

    def _is_ag(self, variant: str) -> bool:
        return variant in AG_VARIANTS

    # ---------------------------------------------------------------- baselines / alone
    def _ag_baseline(self) -> torch.Tensor:
        with region("all_gather then matmul"):
            dist.all_gather_into_tensor(self.ag_full, self.ag_a, group=self.ctx.group)
            torch.matmul(self.ag_full, self.ag_b, out=self.ag_c)
        return self.ag_c

    def _rs_baseline(self) -> torch.Tensor:
        with region("matmul then reduce_scatter"):
            torch.matmul(self.rs_a, self.rs_b, out=self.rs_c)
            dist.reduce_scatter_tensor(self.rs_out, self.rs_c, group=self.ctx.group)
        return self.rs_out

    def baseline_fn(self, variant: str) -> Callable[[], Any]:
        if self._is_ag(variant):
            self._need_ag()
            return self._cached("ag-baseline", lambda: self._ag_baseline)
        self._need_rs()
        return self._cached("rs-baseline", lambda: self._rs_baseline)

    def compute_fn(self, variant: str) -> Callable[[], Any]:
        if self._is_ag(variant):
            return self._cached("ag-compute", lambda: lambda: torch.matmul(self.ag_full, self.ag_b, out=self.ag_c))
        return self._cached("rs-compute", lambda: lambda: torch.matmul(self.rs_a, self.rs_b, out=self.rs_c))

    def comm_fn(self, variant: str) -> Callable[[], Any]:
        g = self.ctx.group
        if self._is_ag(variant):
            return self._cached("ag-comm", lambda: lambda: dist.all_gather_into_tensor(self.ag_full, self.ag_a,
                                                                                      group=g))
        return self._cached("rs-comm", lambda: lambda: dist.reduce_scatter_tensor(self.rs_out, self.rs_c, group=g))

    # ---------------------------------------------------------------- variants
    def variant_fn(self, variant: str) -> Callable[[], Any]:
        makers: dict[str, Callable[[], Callable[[], Any]]] = {
            "fused-ag-matmul": self._make_fused_ag,
            "fused-matmul-rs": self._make_fused_rs,
            "two-stream": lambda: self._make_two_stream(sleep=False),
            "two-stream-sleep": lambda: self._make_two_stream(sleep=True),
        }
        return self._cached("v:" + variant, makers[variant])

    def _make_fused_ag(self) -> Callable[[], torch.Tensor]:
        self._need_ag()
        if not self.ok:
            full, c = torch.empty_like(self.ag_full), torch.empty_like(self.ag_c)

            def unfused() -> torch.Tensor:
                dist.all_gather_into_tensor(full, self.ag_a, group=self.ctx.group)
                return torch.matmul(full, self.ag_b, out=c)

            return unfused
        symm.enable(self.ctx)
        name = self.ctx.group.group_name

        def fused() -> torch.Tensor:
            _, outs = torch.ops.symm_mem.fused_all_gather_matmul(self.ag_a, [self.ag_b], gather_dim=0,
                                                                 group_name=name)
            return outs[0]

        return fused

    def _make_fused_rs(self) -> Callable[[], torch.Tensor]:
        self._need_rs()
        if not self.ok:
            c, out = torch.empty_like(self.rs_c), torch.empty_like(self.rs_out)

            def unfused() -> torch.Tensor:
                torch.matmul(self.rs_a, self.rs_b, out=c)
                dist.reduce_scatter_tensor(out, c, group=self.ctx.group)
                return out

            return unfused
        symm.enable(self.ctx)
        name = self.ctx.group.group_name

        def fused() -> torch.Tensor:
            return torch.ops.symm_mem.fused_matmul_reduce_scatter(self.rs_a, self.rs_b, "sum", 0, name)

        return fused

    def _make_two_stream(self, *, sleep: bool) -> Callable[[], torch.Tensor]:
        """Producer -> barrier -> p2p copy -> barrier, pieces alternating over two streams."""
        self._need_rs()
        ctx = self.ctx
        D, S, N, r = self.D, self.S, self.N, ctx.rank
        rows = self.M // D  # rows of each rank's output block
        pr = rows // S  # rows of one piece
        kp = self.K // D
        a_blocks = self.rs_a.view(D, S, pr, kp)  # [destination rank, piece, rows, K/D]
        stacked = torch.empty(D, S, pr, N, device=ctx.device, dtype=ctx.dtype)  # partials from every source
        result = torch.empty(rows, N, device=ctx.device, dtype=ctx.dtype)
        cycles = int(ctx.params["sleep_cycles"])
        # piece k (over peers and pieces) runs on the backend stream when k is even, on main when odd
        plan = [((r + step) % D, (r - step) % D, i) for step in range(1, D) for i in range(S)]

        if self.ok:
            handle, _ = symm.alloc(ctx, (2, pr, N))  # slot 0: backend stream, slot 1: main stream
            local_slot = [handle.get_buffer(r, (pr, N), ctx.dtype, s * pr * N) for s in range(2)]
            peer_slot = {(q, s): handle.get_buffer(q, (pr, N), ctx.dtype, s * pr * N)
                         for q in range(D) if q != r for s in range(2)}
            backend = Streams(ctx, 1)

            def run() -> torch.Tensor:
                main_stream = torch.cuda.current_stream()
                handle.barrier(channel=0)
                backend.wait_main(0)
                slept = False
                for k, (dst, src, i) in enumerate(plan):
                    slot = k % 2
                    stream_cm = backend.on(0) if slot == 0 else torch.cuda.stream(main_stream)
                    with stream_cm, region(f"two-stream piece {k} (for rank {dst})"):
                        if sleep and slot == 1 and not slept:
                            torch.cuda._sleep(cycles)  # lets the backend stream's producer go first
                            slept = True
                        torch.matmul(a_blocks[dst, i], self.rs_b, out=local_slot[slot])
                        handle.barrier(channel=slot)
                        stacked[src, i].copy_(peer_slot[(src, slot)])
                        handle.barrier(channel=slot)  # peers are done reading our slot
                if sleep and not slept:
                    torch.cuda._sleep(cycles)
                with region("two-stream own block"):
                    torch.matmul(a_blocks[r].reshape(rows, kp), self.rs_b, out=stacked[r].view(rows, N))
                backend.main_waits(0)
                handle.barrier(channel=0)
                torch.sum(stacked.view(D, rows, N), dim=0, out=result)
                return result

            return run

        send_buf = torch.empty(pr, N, device=ctx.device, dtype=ctx.dtype)

        def run_gloo() -> torch.Tensor:
            for k, (dst, src, i) in enumerate(plan):
                with region(f"two-stream piece {k} (for rank {dst})"):
                    torch.matmul(a_blocks[dst, i], self.rs_b, out=send_buf)
                    ops = [dist.P2POp(dist.isend, send_buf, dst, ctx.group),
                           dist.P2POp(dist.irecv, stacked[src, i], src, ctx.group)]
                    for w in dist.batch_isend_irecv(ops):
                        w.wait()
            torch.matmul(a_blocks[r].reshape(rows, kp), self.rs_b, out=stacked[r].view(rows, N))
            torch.sum(stacked.view(D, rows, N), dim=0, out=result)
            return result

        return run_gloo

    def describe(self, variant: str) -> dict[str, Any]:
        d: dict[str, Any] = {"M": self.M, "K": self.K, "N": self.N, "S": self.S, "D": self.D,
                             "op": "all_gather+matmul" if self._is_ag(variant) else "matmul+reduce_scatter"}
        if not self.ok:
            d["fallback"] = f"{self.ctx.spec.cuda_only[variant]} ({self.why})"
        return d


def build(ctx: Ctx, variants: list[str]) -> SymmMem:
    return SymmMem(ctx, variants)


if __name__ == "__main__":
    main(SYMM_MEM, build)
