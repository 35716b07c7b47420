"""AG+GEMM: all-gather of A (rows sharded over ranks) pipelined with C = A @ B.

A is logically [S, D, m, K] (m = M / (S*D)): rank r holds A[:, r] as a local [S, m, K].
Global row order is rank-major ([D, S, m] flattened), which is what a single
all_gather_into_tensor of the local [S*m, K] produces; every variant returns C in
the canonical [S, D, m, N] view so that outputs compare directly.

Run under torchrun:  python -m torch.distributed.run --nproc-per-node 2 -m runners.ag_gemm \
    --variant tuned --profiler torch --out out/ag-gemm
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from runners import ag_gemm_tuned, symm, tuning
from runners.context import Ctx
from runners.harness import main
from runners.specs import AG_GEMM
from runners.streams import Streams, region


class AgGemm(tuning.TunedWorkload):
    TUNED_ALGO = "ag-gemm"
    TUNED_MODULE = ag_gemm_tuned

    def __init__(self, ctx: Ctx, variants: list[str]) -> None:
        super().__init__(ctx)
        p = ctx.params
        self.D, self.S = ctx.world, int(p["steps"])
        self.M, self.K, self.N = int(p["M"]), int(p["K"]), int(p["N"])
        if self.M % (self.S * self.D):
            raise ValueError(f"M={self.M} must be a multiple of steps*ranks={self.S * self.D}")
        self.m = self.M // (self.S * self.D)
        dev, dt = ctx.device, ctx.dtype
        self.a_local = torch.randn(self.S, self.m, self.K, device=dev, dtype=dt)
        # B is the same on every rank (a replicated weight)
        gen = torch.Generator(device="cpu").manual_seed(int(p["seed"]))
        self.b = torch.randn(self.K, self.N, generator=gen, dtype=torch.float32).to(dev, dt) / self.K**0.5
        self.streams = Streams(ctx, int(p["streams"]))
        self._fns: dict[str, Callable[[], Any]] = {}
        self._tuned_mode: str | None = None
        self._tuned: Callable[[], Any] | None = None
        self._tuning: dict[str, Any] | None = None
        self._fallbacks: dict[str, str] = {}
        # baseline buffers (always needed: correctness reference, compute/comm alone)
        self.full = torch.empty(self.D * self.S * self.m, self.K, device=dev, dtype=dt)
        self.c_base = torch.empty(self.D * self.S * self.m, self.N, device=dev, dtype=dt)
        for v in variants:
            self.variant_fn(v)  # allocate up front, outside any timing

    # ---------------------------------------------------------------- helpers
    def canonical_rank_major(self, c: torch.Tensor) -> torch.Tensor:
        """[D*S*m, N] in rank-major row order -> [S, D, m, N] view."""
        return c.view(self.D, self.S, self.m, self.N).transpose(0, 1)

    # ---------------------------------------------------------------- baseline / alone
    def _baseline(self) -> torch.Tensor:
        with region("ag-gemm baseline: all_gather"):
            dist.all_gather_into_tensor(self.full, self.a_local.view(-1, self.K), group=self.ctx.group)
        with region("ag-gemm baseline: matmul"):
            torch.matmul(self.full, self.b, out=self.c_base)
        return self.canonical_rank_major(self.c_base)

    def _compute_alone(self) -> None:
        torch.matmul(self.full, self.b, out=self.c_base)

    def _comm_alone(self) -> None:
        dist.all_gather_into_tensor(self.full, self.a_local.view(-1, self.K), group=self.ctx.group)

    def baseline_fn(self, variant: str) -> Callable[[], Any]:
        return self._cached("baseline", lambda: self._baseline)

    def compute_fn(self, variant: str) -> Callable[[], Any]:
        return self._cached("compute", lambda: self._compute_alone)

    def comm_fn(self, variant: str) -> Callable[[], Any]:
        return self._cached("comm", lambda: self._comm_alone)

    def _cached(self, key: str, make: Callable[[], Callable[[], Any]]) -> Callable[[], Any]:
        if key not in self._fns:
            self._fns[key] = make()
        return self._fns[key]

    # ---------------------------------------------------------------- variants
    def variant_fn(self, variant: str) -> Callable[[], Any]:
        makers: dict[str, Callable[[], Callable[[], Any]]] = {
            "baseline": lambda: self._baseline,
            "sync-in-loop": lambda: self._make_pipelined(fork_in_loop=True, host_sync=False),
            "sync-before-loop": lambda: self._make_pipelined(fork_in_loop=False, host_sync=False),
            "host-sync": lambda: self._make_pipelined(fork_in_loop=False, host_sync=True),
            "tuned": self._make_tuned,
            "fused-ref": self._make_fused,
        }
        return self._cached("v:" + variant, makers[variant])

    def _make_pipelined(self, *, fork_in_loop: bool, host_sync: bool) -> Callable[[], torch.Tensor]:
        """Step s on worker stream s % streams: all-gather slice s, then its matmul.

        The join (main waits on the worker) sits inside the loop, as a host program
        lowered step by step emits it. With fork_in_loop the next worker then waits on
        main, i.e. on the previous step: the streams serialize. Issuing every fork
        before the loop removes that chain.
        """
        S, D, m, K, N = self.S, self.D, self.m, self.K, self.N
        gathered = torch.empty(S, D * m, K, device=self.ctx.device, dtype=self.ctx.dtype)
        c = torch.empty(S, D * m, N, device=self.ctx.device, dtype=self.ctx.dtype)
        st, group = self.streams, self.ctx.group

        def run() -> torch.Tensor:
            if not fork_in_loop:
                for i in range(len(st)):
                    st.wait_main(i)
            for s in range(S):
                if fork_in_loop:
                    st.wait_main(s)
                with st.on(s), region(f"ag-gemm step {s}"):
                    dist.all_gather_into_tensor(gathered[s], self.a_local[s], group=group)
                    torch.matmul(gathered[s], self.b, out=c[s])
                if host_sync:
                    st.host_sync(s)
                st.main_waits(s)
            return c.view(S, D, m, N)

        return run

    def _make_tuned(self) -> Callable[[], Any]:
        """Calls whichever schedule prepare("tuned") chose (runners/ag_gemm_tuned.py)."""

        def run() -> Any:
            if self._tuned is None:
                raise RuntimeError("tuned: prepare('tuned') has not chosen a schedule yet")
            return self._tuned()

        return run

    def _make_fused(self) -> Callable[[], torch.Tensor]:
        """PyTorch's fused_all_gather_matmul (CUDA symmetric memory); unfused with gloo."""
        ctx = self.ctx
        a_flat = self.a_local.view(-1, self.K)
        if not symm.available(ctx):
            self._fallbacks["fused-ref"] = "fused op unavailable: " + symm.why_unavailable(ctx)
            full = torch.empty_like(self.full)
            out = torch.empty_like(self.c_base)

            def unfused() -> torch.Tensor:
                dist.all_gather_into_tensor(full, a_flat, group=ctx.group)
                torch.matmul(full, self.b, out=out)
                return self.canonical_rank_major(out)

            return unfused
        symm.enable(ctx)
        name = ctx.group.group_name

        def fused() -> torch.Tensor:
            _, outs = torch.ops.symm_mem.fused_all_gather_matmul(a_flat, [self.b], gather_dim=0, group_name=name)
            return self.canonical_rank_major(outs[0])

        return fused

    def describe(self, variant: str) -> dict[str, Any]:
        d: dict[str, Any] = {"M": self.M, "K": self.K, "N": self.N, "S": self.S, "D": self.D, "m": self.m,
                             "streams": len(self.streams), "layout": "A [S, D, M/(S*D), K] sharded on D"}
        if variant == "tuned":
            d["tuned_schedule"] = self._tuned_mode
        if variant in self._fallbacks:
            d["fallback"] = self._fallbacks[variant]
        return d


def build(ctx: Ctx, variants: list[str]) -> AgGemm:
    return AgGemm(ctx, variants)


if __name__ == "__main__":
    main(AG_GEMM, build)
