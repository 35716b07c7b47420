"""Lightning Thunder's own FSDP (`thunder.distributed.fsdp`) on a few Llama-like blocks.

The seed this runner answers is Thunder's FSDP issue: with ZeRO-2 and no bucketing the
all-gathers were launched before the computation, with bucketing the packing copies
(CatArrayBatchedCopy / direct_copy_kernel) sat beside the all-gathers, and ZeRO-3 left launch
gaps. So the variants are Thunder's own switches, not a re-creation in plain PyTorch:
`fsdp(thunder.jit(model), sharding_strategy=ZERO2|ZERO3, bucketing_strategy=NONE|BLOCK)`
(in lightning-thunder 0.2.6 fsdp() wants a ThunderModule, so jit comes first).

One iteration = zero_grad, forward, loss, backward, SGD step (runners/training.py, shared with runners/fsdp.py). The
baseline is the same jitted model replicated, gradients all-reduced and averaged after backward.
Correctness: before a model's first optimizer step, the loss and the full gradients (the
shards gathered) of one step equal the baseline's (Thunder pre-averages its reduce-scatters).
That first step also compiles the model, so every model is traced and compiled once.

Thunder is imported for real (build() fails with an install hint where it is missing); the
manifest records its version, the executors the model was compiled with, and what Thunder's
own execution traces hold (collectives, waits, where the first matmul sits among the gathers).

Run under torchrun:  python -m torch.distributed.run --nproc-per-node 2 -m runners.thunder_fsdp \
    --variant zero2-none --profiler torch --out out/thunder-fsdp
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from runners.context import Ctx
from runners.harness import main
from runners.specs import THUNDER_FSDP
from runners.training import TrainingWorkload, all_reduce_alone, sharded_collectives
from runners.workload import rel_error

INSTALL_HINT = ("thunder-fsdp needs lightning-thunder (tested: 0.2.6 with torch 2.11): pip install "
                "lightning-thunder==0.2.6, or on a host without an index carry the wheels that "
                "`bash runners/pack_host_deps.sh 3.12 thunder` unpacks into .pydeps/")


def import_thunder() -> Any:
    """The thunder package, or a RuntimeError that says how to get it (the rank's error file names it)."""
    try:
        import thunder
        import thunder.distributed  # noqa: F401  (fsdp, FSDPType, FSDPBucketingStrategy)
    except (ImportError, AttributeError) as exc:  # AttributeError: a torch this thunder was not made for
        raise RuntimeError(f"{INSTALL_HINT} ({type(exc).__name__}: {exc})") from exc
    return thunder


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class LlamaBlock(nn.Module):
    """Pre-norm block as in Llama: RMSNorm, causal attention (no RoPE), RMSNorm, SwiGLU MLP; no biases."""

    def __init__(self, dim: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.heads = heads
        self.attn_norm = RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.mlp_norm = RMSNorm(dim)
        self.gate_up = nn.Linear(dim, 2 * ffn, bias=False)
        self.down = nn.Linear(ffn, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        qkv = self.qkv(self.attn_norm(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        x = x + self.wo(att.transpose(1, 2).reshape(b, s, d))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class LlamaStack(nn.Module):
    def __init__(self, layers: int, dim: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(LlamaBlock(dim, heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)


def strategies(variant: str) -> tuple[str, str]:
    """(sharding, bucketing) of a variant name: zero2-none -> ("ZERO2", "NONE")."""
    sharding, bucketing = variant.split("-")
    return sharding.upper(), bucketing.upper()


def full_grads(model: nn.Module, group: dist.ProcessGroup, world: int) -> dict[str, torch.Tensor]:
    """Every parameter's whole gradient: shards (split on dim 0, maybe padded) gathered from all ranks."""
    out: dict[str, torch.Tensor] = {}
    for name, p in model.named_parameters():
        g = p.grad.detach().contiguous()
        parts = [torch.empty_like(g) for _ in range(world)]
        dist.all_gather(parts, g, group=group)
        out[name] = torch.cat(parts).float()
    return out


class ThunderFsdp(TrainingWorkload):
    def __init__(self, ctx: Ctx, variants: list[str]) -> None:
        super().__init__(ctx)
        self.thunder = import_thunder()
        p = ctx.params
        self.layers, self.dim, self.heads = int(p["layers"]), int(p["dim"]), int(p["heads"])
        self.ffn, self.seq, self.batch = int(p["ffn"]), int(p["seq"]), int(p["batch"])
        if self.dim % self.heads:
            raise ValueError(f"dim={self.dim} must be a multiple of heads={self.heads}")
        self.x = torch.randn(self.batch, self.seq, self.dim, device=ctx.device, dtype=ctx.dtype)
        self._errors: dict[str, float] = {}
        # the replicated baseline, compiled once; its first step (before any update) is the reference
        base = self._model("baseline")[0]
        self.ref_loss, self.ref_grads = self._first_step("baseline", base)
        self._models["baseline"][1].zero_grad(set_to_none=True)

    # ---------------------------------------------------------------- models
    def _new_model(self) -> LlamaStack:
        """The same initial weights on every rank and for every variant."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(self.ctx.params["seed"]))
            model = LlamaStack(self.layers, self.dim, self.heads, self.ffn)
        return model.to(self.ctx.device, self.ctx.dtype)

    def _build(self, variant: str) -> nn.Module:
        thunder = self.thunder
        jitted = thunder.jit(self._new_model())
        if variant == "baseline":
            return jitted
        from thunder.distributed import FSDPBucketingStrategy, FSDPType, fsdp

        sharding, bucketing = strategies(variant)
        return fsdp(jitted, device=self.ctx.device, sharding_strategy=FSDPType[sharding],
                    bucketing_strategy=FSDPBucketingStrategy[bucketing])

    # ---------------------------------------------------------------- one step
    def _first_step(self, variant: str, model: nn.Module) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        loss = self._forward_backward(variant, model).detach().float().reshape(1)
        if variant == "baseline":
            grads = {n: p.grad.detach().float() for n, p in model.named_parameters()}
        else:
            grads = full_grads(model, self.ctx.group, self.ctx.world)
        return loss, grads

    def prepare(self, variant: str) -> None:
        """Build and compile the variant's model; its first step's loss and gradients become the check."""
        if variant in self._errors:
            return
        model, opt = self._model(variant)
        if variant == "baseline":
            self._errors[variant] = 0.0
            return
        loss, grads = self._first_step(variant, model)
        opt.zero_grad(set_to_none=True)
        missing = sorted(set(self.ref_grads) ^ set(grads))
        if missing:
            raise RuntimeError(f"{variant}: parameters differ from the baseline's: {missing[:5]}")
        names = sorted(grads)
        # padded shards gather to more rows than the parameter has: compare the parameter's own rows
        ours = [grads[n][:self.ref_grads[n].shape[0]].reshape(self.ref_grads[n].shape) for n in names]
        self._errors[variant] = max(rel_error(self.corrupt(loss), self.ref_loss),
                                    rel_error(self.corrupt(ours), [self.ref_grads[n] for n in names]))

    def check(self, variant: str) -> float:
        """The error prepare() measured on the model's first step, against the replicated baseline's."""
        if variant not in self._errors:
            self.prepare(variant)
        return self._errors[variant]

    # ---------------------------------------------------------------- alone
    def compute_fn(self, variant: str) -> Callable[[], Any]:
        """The baseline's compiled step without its all-reduce: the same kernels, no communication."""
        return self._cached("compute", lambda: self._local_step(*self._model("baseline")))

    def comm_fn(self, variant: str) -> Callable[[], Any]:
        """The variant's collectives alone, on buffers of the sizes Thunder moves.

        ZeRO-3 gathers every parameter twice (forward, and again in backward), ZeRO-2 once; both
        reduce-scatter every gradient once. NONE: one collective per parameter; BLOCK: one per
        block (and one for the final norm). Baseline: one all-reduce of all gradients.
        """
        kind = "allreduce" if variant == "baseline" else variant

        def make() -> Callable[[], Any]:
            model = self._new_model()
            if kind == "allreduce":
                return all_reduce_alone(self.ctx, sum(p.numel() for p in model.parameters()))
            sharding, bucketing = strategies(kind)
            if bucketing == "BLOCK":
                sizes = [sum(p.numel() for p in b.parameters()) for b in model.blocks]
                sizes.append(sum(p.numel() for p in model.norm.parameters()))
            else:
                sizes = [p.numel() for p in model.parameters()]
            del model
            return sharded_collectives(self.ctx, sizes, gathers=2 if sharding == "ZERO3" else 1)

        return self._cached("comm:" + kind, make)

    # ---------------------------------------------------------------- manifest
    def describe(self, variant: str) -> dict[str, Any]:
        params = sum(p.numel() for p in self._new_model().parameters())
        d: dict[str, Any] = {"model": "Llama-like blocks (RMSNorm, causal SDPA without RoPE, SwiGLU)",
                             "layers": self.layers, "dim": self.dim, "heads": self.heads, "ffn": self.ffn,
                             "seq": self.seq, "batch_per_rank": self.batch, "parameters": params,
                             "optimizer": "SGD", "step": "zero_grad + forward + loss + backward + optimizer step",
                             "thunder": thunder_facts(self.thunder, self._models[variant][0] if variant in
                                                      self._models else None)}
        if variant != "baseline":
            d["sharding_strategy"], d["bucketing_strategy"] = strategies(variant)
        return d


def thunder_facts(thunder: Any, model: nn.Module | None) -> dict[str, Any]:
    """Thunder's version, its executors, and what its last forward/backward execution traces hold."""
    facts: dict[str, Any] = {"version": getattr(thunder, "__version__", "unknown"),
                             "default_executors": [e.name for e in thunder.get_default_executors()],
                             "always_executors": [e.name for e in thunder.get_always_executors()]}
    with contextlib.suppress(ImportError, AttributeError):
        from thunder.executors import nvfuser_available
        facts["nvfuser_available"] = bool(nvfuser_available())
    if model is None:
        return facts
    cd = thunder.compile_data(model)
    if cd is not None:
        facts["executors"] = [e.name for e in cd.executors_list]
    for key, getter in (("forward_trace", thunder.last_traces), ("backward_trace", thunder.last_backward_traces)):
        try:
            facts[key] = trace_summary([b.sym.name for b in getter(model)[-1].bound_symbols])
        except (TypeError, IndexError, AttributeError) as exc:
            facts[key] = {"unavailable": f"{type(exc).__name__}: {exc}"}
    return facts


# Thunder's bucketing prims: the copies into and out of a bucket's buffer around its collective
BUCKET_COPIES = ("pack", "unpack", "pack_for_fsdp", "unpack_for_fsdp")


def trace_summary(names: list[str]) -> dict[str, Any]:
    """Counts of a trace's collectives, waits and matmuls, and how many gathers come before the first matmul."""
    def is_gather(n: str) -> bool:
        return "all_gather" in n

    def is_matmul(n: str) -> bool:
        return n in ("linear", "matmul") or n.endswith(("_linear", "_matmul", "mm"))

    first_mm = next((i for i, n in enumerate(names) if is_matmul(n)), len(names))
    return {"symbols": len(names),
            "all_gathers": sum(map(is_gather, names)),
            "reduce_scatters": sum("reduce_scatter" in n for n in names),
            "all_reduces": sum("all_reduce" in n for n in names),
            "waits": sum("wait" in n for n in names),
            "packs": sum(n.split("_prim_impl")[0] in BUCKET_COPIES for n in names),
            "matmuls": sum(map(is_matmul, names)),
            "all_gathers_before_first_matmul": sum(map(is_gather, names[:first_mm]))}


def build(ctx: Ctx, variants: list[str]) -> ThunderFsdp:
    return ThunderFsdp(ctx, variants)


if __name__ == "__main__":
    main(THUNDER_FSDP, build)
