"""What the FSDP runners share: one training step, the replicated baseline's gradient all-reduce, and
the sharded collectives timed alone.

runners/fsdp.py (PyTorch's FSDP2) and runners/thunder_fsdp.py (Thunder's fsdp) differ in how a
model is built and sharded; their iteration is the same: zero_grad, forward, loss, backward,
optimizer step, no host sync inside (the loss stays a tensor). Subclasses build the model of a
variant (`_build`) and may add work around forward and backward (`_forward_backward`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from runners.context import Ctx
from runners.streams import region
from runners.workload import Workload


def average_grads(model: nn.Module, ctx: Ctx) -> None:
    """The replicated baseline's gradient sync: one all-reduce of every gradient, then the average."""
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=ctx.group)
    flat.div_(ctx.world)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def square_loss(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The loss every FSDP runner trains on: the mean square of the output, in fp32."""
    return model(x).float().pow(2).mean()


def sharded_collectives(ctx: Ctx, sizes: list[int], gathers: int) -> Callable[[], None]:
    """A sharded step's collectives alone: `gathers` all-gathers and one reduce-scatter per flat buffer
    of each size (elements), sharded over the ranks (rounded up, as a padded shard is)."""
    world = ctx.world
    shards = [torch.zeros((n + world - 1) // world, device=ctx.device, dtype=ctx.dtype) for n in sizes]
    fulls = [torch.zeros(s.numel() * world, device=ctx.device, dtype=ctx.dtype) for s in shards]

    def comm() -> None:
        for _ in range(gathers):
            for s, f in zip(shards, fulls, strict=True):
                dist.all_gather_into_tensor(f, s, group=ctx.group)
        for s, f in zip(shards, fulls, strict=True):
            dist.reduce_scatter_tensor(s, f, group=ctx.group)

    return comm


def all_reduce_alone(ctx: Ctx, numel: int) -> Callable[[], Any]:
    """The replicated baseline's communication alone: one all-reduce of all gradients."""
    flat = torch.zeros(numel, device=ctx.device, dtype=ctx.dtype)
    return lambda: dist.all_reduce(flat, group=ctx.group)


class TrainingWorkload(Workload):
    """A model per variant with its SGD optimizer, and one training step as the iteration."""

    x: torch.Tensor

    def __init__(self, ctx: Ctx) -> None:
        super().__init__(ctx)
        self._fns: dict[str, Callable[[], Any]] = {}
        self._models: dict[str, tuple[nn.Module, torch.optim.Optimizer]] = {}

    @abstractmethod
    def _build(self, variant: str) -> nn.Module:
        """The variant's model, sharded as the variant says (the baseline: replicated)."""

    def _model(self, variant: str) -> tuple[nn.Module, torch.optim.Optimizer]:
        if variant not in self._models:
            model = self._build(variant)
            opt = torch.optim.SGD(model.parameters(), lr=float(self.ctx.params["lr"]))
            self._models[variant] = (model, opt)
        return self._models[variant]

    def _forward_backward(self, variant: str, model: nn.Module) -> torch.Tensor:
        """Forward, loss and backward; the baseline then all-reduces and averages its gradients."""
        with region("forward"):
            loss = square_loss(model, self.x)
        with region("backward"):
            loss.backward()
        if variant == "baseline":
            with region("baseline: all-reduce gradients"):
                average_grads(model, self.ctx)
        return loss

    def _make_step(self, variant: str) -> Callable[[], torch.Tensor]:
        model, opt = self._model(variant)

        def step() -> torch.Tensor:
            opt.zero_grad(set_to_none=True)
            loss = self._forward_backward(variant, model)
            with region("optimizer step"):
                opt.step()
            return loss.detach()

        return step

    def _local_step(self, model: nn.Module, opt: torch.optim.Optimizer) -> Callable[[], torch.Tensor]:
        """The same step without any communication (the compute alone)."""
        def step() -> torch.Tensor:
            opt.zero_grad(set_to_none=True)
            loss = square_loss(model, self.x)
            loss.backward()
            opt.step()
            return loss.detach()

        return step

    def variant_fn(self, variant: str) -> Callable[[], Any]:
        if variant not in self.ctx.spec.variants:
            raise KeyError(variant)
        return self._cached("v:" + variant, lambda: self._make_step(variant))

    def _cached(self, key: str, make: Callable[[], Callable[[], Any]]) -> Callable[[], Any]:
        if key not in self._fns:
            self._fns[key] = make()
        return self._fns[key]

    def baseline_fn(self, variant: str) -> Callable[[], Any]:
        return self.variant_fn("baseline")
