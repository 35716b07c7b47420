"""FSDP2 (fully_shard) training steps of a small transformer stack, by sharding schedule.

One iteration = zero_grad, forward, loss, backward, SGD step; no host sync inside
(the loss stays a tensor). Correctness: the loss and the full gradients of one
step equal those of the replicated baseline (gradients all-reduced and averaged).

Prefetch switches use FSDP2's own knobs: FSDPModule._set_unshard_async_op(True)
runs each pre-forward unshard on the compute stream (no implicit prefetch), and a
backward prefetch list naming only the module itself turns the default backward
prefetch of the next block into a no-op. The front-loaded variant issues every
block's unshard (async) and waits on all of them before the forward starts.

Run under torchrun:  python -m torch.distributed.run --nproc-per-node 2 -m runners.fsdp \
    --variant zero3 --profiler torch --out out/fsdp
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from runners.context import Ctx
from runners.harness import main
from runners.specs import FSDP
from runners.streams import region
from runners.training import TrainingWorkload, all_reduce_alone, sharded_collectives
from runners.workload import rel_error


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention and a 4x GELU MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(att)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Stack(nn.Module):
    def __init__(self, layers: int, dim: int, heads: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)


def _fully_shard() -> Callable[..., Any]:
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6 kept FSDP2 under _composable
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


class Fsdp(TrainingWorkload):
    def __init__(self, ctx: Ctx, variants: list[str]) -> None:
        super().__init__(ctx)
        p = ctx.params
        self.layers, self.dim, self.heads = int(p["layers"]), int(p["dim"]), int(p["heads"])
        self.seq, self.batch = int(p["seq"]), int(p["batch"])
        if self.dim % self.heads:
            raise ValueError(f"dim={self.dim} must be a multiple of heads={self.heads}")
        self.x = torch.randn(self.batch, self.seq, self.dim, device=ctx.device, dtype=ctx.dtype)
        for v in variants:
            self.variant_fn(v)

    # ---------------------------------------------------------------- models
    def _new_model(self) -> Stack:
        """The same initial weights on every rank and for every variant: drawn on the rank's device from one
        seed (each variant's model, the check's two, compute alone and describe draw a stack; drawn on one CPU
        thread at dim 4096 they took most of a 210 s launch that finished two variants)."""
        device = self.ctx.device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), device:
            torch.manual_seed(int(self.ctx.params["seed"]))
            model = Stack(self.layers, self.dim, self.heads)
        return model.to(dtype=self.ctx.dtype)

    def _build(self, variant: str) -> nn.Module:
        model = self._new_model()
        if variant == "baseline":
            return model
        fully_shard = _fully_shard()
        zero3 = variant.startswith("zero3")
        for blk in model.blocks:
            fully_shard(blk, reshard_after_forward=zero3)
        fully_shard(model, reshard_after_forward=zero3)
        blocks: list[Any] = list(model.blocks)
        if variant.endswith("no-prefetch"):
            model._set_unshard_async_op(True)  # type: ignore[operator]
            for mod in [*blocks, model]:
                mod.set_modules_to_backward_prefetch([mod])  # only itself: nothing ahead
        elif variant == "zero3-prefetch":
            depth = int(self.ctx.params["prefetch_depth"])
            for i, blk in enumerate(blocks):
                blk.set_modules_to_forward_prefetch(blocks[i + 1:i + 1 + depth])
                blk.set_modules_to_backward_prefetch(blocks[max(0, i - depth):i][::-1])
        return model

    # ---------------------------------------------------------------- one step
    def _forward_backward(self, variant: str, model: nn.Module) -> torch.Tensor:
        if variant == "front-loaded":
            with region("front-loaded: all unshards, then all waits"):
                handles = [m.unshard(async_op=True) for m in [*model.blocks, model]]  # type: ignore[operator]
                for h in handles:
                    if h is not None:
                        h.wait()
        return super()._forward_backward(variant, model)

    # ---------------------------------------------------------------- correctness
    def _grads_after_one_step(self, variant: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model = self._build(variant)
        loss = self._forward_backward(variant, model)
        grads = []
        for p in model.parameters():
            g = p.grad
            if hasattr(g, "full_tensor"):
                g = g.full_tensor()  # type: ignore[union-attr]
            grads.append(g.detach().float())
        return loss.detach().float().reshape(1), grads

    def check(self, variant: str) -> float:
        """Loss and full gradients of one step on fresh models vs the replicated baseline."""
        loss, grads = self._grads_after_one_step(variant)
        ref_loss, ref_grads = self._grads_after_one_step("baseline")
        return max(rel_error(self.corrupt(loss), ref_loss), rel_error(self.corrupt(grads), ref_grads))

    # ---------------------------------------------------------------- alone
    def compute_fn(self, variant: str) -> Callable[[], Any]:
        """The same step on an unsharded local model, no communication at all."""
        def make() -> Callable[[], Any]:
            model = self._new_model()
            return self._local_step(model, torch.optim.SGD(model.parameters(), lr=float(self.ctx.params["lr"])))

        return self._cached("compute", make)

    def comm_fn(self, variant: str) -> Callable[[], Any]:
        """The variant's collectives alone, per block with flat buffers of the block's size.

        ZeRO-3: 2 all-gathers (forward, backward) + 1 reduce-scatter per block;
        ZeRO-2 and front-loaded: 1 + 1; baseline: one all-reduce of all gradients.
        """
        kind = "allreduce" if variant == "baseline" else ("zero3" if variant.startswith("zero3") else "zero2")

        def make() -> Callable[[], Any]:
            model = self._new_model()
            sizes = [sum(p.numel() for p in b.parameters()) for b in model.blocks]
            sizes.append(sum(p.numel() for p in model.norm.parameters()))
            del model
            if kind == "allreduce":
                return all_reduce_alone(self.ctx, sum(sizes))
            return sharded_collectives(self.ctx, sizes, gathers=2 if kind == "zero3" else 1)

        return self._cached("comm:" + kind, make)

    def describe(self, variant: str) -> dict[str, Any]:
        params = sum(p.numel() for p in self._new_model().parameters())
        return {"layers": self.layers, "dim": self.dim, "heads": self.heads, "seq": self.seq,
                "batch_per_rank": self.batch, "parameters": params, "optimizer": "SGD",
                "step": "zero_grad + forward + loss + backward + optimizer step"}


def build(ctx: Ctx, variants: list[str]) -> Fsdp:
    return Fsdp(ctx, variants)


if __name__ == "__main__":
    main(FSDP, build)
