"""GEMM+RS: C = A @ B with K sharded over ranks, then a reduce-scatter of C over rows.

Rank r holds A_r [M, K/D] and B_r [K/D, N]; the result on rank r is rows
[r*M/D, (r+1)*M/D) of sum_r A_r @ B_r, as reduce_scatter_tensor gives it.

The `tuned` variant chooses its schedule per shape, dtype, world size and GPU by a short
timed search (runners/tuning.py), cached per host; runners/gemm_rs_tuned.py lists the
candidates and which finding of this tool on the recorded traces led to each.

Run under torchrun:  python -m torch.distributed.run --nproc-per-node 2 -m runners.gemm_rs \
    --variant ring --profiler torch --out out/gemm-rs
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from runners import gemm_rs_tuned, symm, tuning
from runners.context import Ctx
from runners.harness import main
from runners.specs import GEMM_RS
from runners.streams import Streams, region


class GemmRs(tuning.TunedWorkload):
    TUNED_ALGO = "gemm-rs"
    TUNED_MODULE = gemm_rs_tuned

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
        self._tuned: Callable[[], Any] | None = None
        self._tuning: dict[str, Any] | None = None
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

    def ring_schedule(self, steps: int) -> Callable[[], torch.Tensor]:
        """The coalesced ring over `steps` blocks: the tuned search's ring candidate (runners/gemm_rs_tuned.py)."""
        return self._make_ring(coalesced=True, steps=steps)

    def _make_ring(self, *, coalesced: bool, steps: int | None = None) -> Callable[[], torch.Tensor]:
        """Ring reduce-scatter fused with the matmul, S/D sub-blocks per ring step.

        Ring step j computes the partial for rank c = (r+j+1) % D, adds the partial sum
        the right neighbour (r+1) sent for c, and passes it to the left neighbour (r-1).
        At the last step c == r: the sum is complete and is written into the output.
        """
        D, S, N, r = self.D, steps or self.S, self.N, self.ctx.rank
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

    def _make_tuned(self) -> Callable[[], Any]:
        """Calls whichever schedule prepare("tuned") chose (runners/gemm_rs_tuned.py)."""

        def run() -> Any:
            if self._tuned is None:
                raise RuntimeError("tuned: prepare('tuned') has not chosen a schedule yet")
            return self._tuned()

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
            d["tuned_schedule"] = self._tuned_mode
        if variant in self._fallbacks:
            d["fallback"] = self._fallbacks[variant]
        return d


def build(ctx: Ctx, variants: list[str]) -> GemmRs:
    return GemmRs(ctx, variants)


if __name__ == "__main__":
    main(GEMM_RS, build)
