"""The workload interface every algorithm implements, and the correctness check.

A workload owns an algorithm's buffers and hands out one callable per iteration of each
variant, of the non-overlapped baseline, of the compute alone and of the communication
alone; the harness warms, checks, times and profiles those callables.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch

from runners.context import Ctx

# Relative-error bounds (Frobenius norm) per dtype: a few units of the dtype's rounding
# error, so different summation orders pass and a wrong block (error ~1) fails.
REL_ERROR_BOUND: dict[torch.dtype, float] = {
    torch.bfloat16: 2e-2,
    torch.float16: 5e-3,
    torch.float32: 1e-4,
}


class CorrectnessError(RuntimeError):
    """A variant's output differs from the non-overlapped baseline beyond the dtype bound."""


class Workload(ABC):
    """Base class: an algorithm's buffers and its per-iteration callables.

    Subclasses implement variant_fn (one iteration of a variant; returns the output in
    a canonical layout shared with the baseline), baseline_fn, compute_fn and comm_fn.
    """

    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx

    @abstractmethod
    def variant_fn(self, variant: str) -> Callable[[], Any]:
        ...

    @abstractmethod
    def baseline_fn(self, variant: str) -> Callable[[], Any]:
        """The non-overlapped schedule this variant is checked and compared against."""
        ...

    @abstractmethod
    def compute_fn(self, variant: str) -> Callable[[], Any]:
        ...

    @abstractmethod
    def comm_fn(self, variant: str) -> Callable[[], Any]:
        ...

    def check(self, variant: str) -> float:
        """Relative error of the variant's output against the baseline's."""
        out = self.variant_fn(variant)()
        ref = self.baseline_fn(variant)()
        return rel_error(self.corrupt(out), ref)

    def corrupt(self, out: Any) -> Any:
        """Test hook (--corrupt-rank): a wrong output must fail the check on that rank."""
        if self.ctx.params.get("corrupt_rank") != self.ctx.rank:
            return out
        if isinstance(out, list | tuple):
            return [t + 1 for t in out]
        return out + 1

    def describe(self, variant: str) -> dict[str, Any]:
        """Extra facts for the manifest (shapes, fallbacks taken)."""
        return {}

    def prepare(self, variant: str) -> None:
        """Work a variant needs once before it runs (the tuned variant's schedule search)."""
        return None

    def tuning(self, variant: str) -> dict[str, Any] | None:
        """How the variant's schedule was chosen (search or cache), for the manifest; None if not tuned."""
        return None


def rel_error(out: Any, ref: Any) -> float:
    """||out - ref|| / ||ref|| in float64 over all tensors (lists are concatenated)."""
    if isinstance(out, list | tuple):
        out = torch.cat([t.detach().reshape(-1).double() for t in out])
        ref = torch.cat([t.detach().reshape(-1).double() for t in ref])
    out, ref = out.detach().double(), ref.detach().double()
    if out.shape != ref.shape:
        raise CorrectnessError(f"output shape {tuple(out.shape)} != baseline shape {tuple(ref.shape)}")
    denom = torch.linalg.vector_norm(ref).item()
    num = torch.linalg.vector_norm(out - ref).item()
    return num / denom if denom > 0 else num


def rel_ref(out: Any) -> Any:
    """A copy of an output to check others against later (the buffer it lives in gets reused)."""
    if isinstance(out, list | tuple):
        return [t.detach().clone() for t in out]
    return out.detach().clone()
