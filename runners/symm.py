"""Thin helpers over torch.distributed._symmetric_memory (a private, moving API).

Kept in one place so that a PyTorch version change is fixed here once, and so
that every caller gets the same "why not" message when it is unavailable
(CPU/gloo runs take the documented fallback instead).
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import torch

from runners.context import Ctx


def why_unavailable(ctx: Ctx) -> str:
    if not ctx.cuda:
        return "no CUDA (gloo backend)"
    try:
        import torch.distributed._symmetric_memory  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the torch build
        return f"torch.distributed._symmetric_memory not importable: {exc}"
    if not hasattr(torch.ops, "symm_mem"):
        return "torch.ops.symm_mem missing in this torch build"
    return ""


def available(ctx: Ctx) -> bool:
    return why_unavailable(ctx) == ""


def transport(ctx: Ctx, requested: str, fallback: str) -> str:
    """`--tuned-comm` as the tuned variants read it: "auto"/"ce" take the copy engine where symmetric
    memory works, else `fallback`; an explicit "ce" on CUDA without it is an error, not a fallback."""
    if requested not in ("auto", "ce"):
        return requested
    if available(ctx):
        return "ce"
    if requested == "ce" and ctx.cuda:
        raise RuntimeError(f"--tuned-comm ce: symmetric memory unavailable ({why_unavailable(ctx)})")
    return fallback


def enable(ctx: Ctx) -> None:
    """Register the group with symmetric memory (needed by older torch, a no-op/deprecated in newer)."""
    import torch.distributed._symmetric_memory as sm

    fn = getattr(sm, "enable_symm_mem_for_group", None)
    if fn is not None:
        with warnings.catch_warnings(), contextlib.suppress(Exception):
            warnings.simplefilter("ignore")
            fn(ctx.group.group_name)


def alloc(ctx: Ctx, shape: tuple[int, ...], dtype: torch.dtype | None = None) -> tuple[Any, torch.Tensor]:
    """A symmetric buffer every rank can read through the copy engine; returns (handle, local tensor)."""
    import torch.distributed._symmetric_memory as sm

    enable(ctx)
    t = sm.empty(shape, dtype=dtype or ctx.dtype, device=ctx.device)
    handle = sm.rendezvous(t, ctx.group.group_name)
    return handle, t


_SCRATCH: dict[tuple[str, torch.dtype], tuple[Any, torch.Tensor]] = {}


def scratch(ctx: Ctx, shape: tuple[int, ...], tag: str) -> tuple[Any, torch.Tensor, Any]:
    """A symmetric buffer of `shape` carved from one per-tag allocation that only grows.

    Every tuning candidate (and every shape of a grid) views the same memory instead of
    allocating and rendezvousing its own: returns (handle, local view, remote(q) -> peer q's view).
    Collective: every rank must ask for the same shapes in the same order. A request larger than
    the allocation replaces it: the views made before, the peers' above all, must not be used
    after (callers ask for the largest size they will need first).
    """
    numel = 1
    for n in shape:
        numel *= n
    key = (tag, ctx.dtype)
    have = _SCRATCH.get(key)
    if have is None or have[1].numel() < numel:
        _SCRATCH.pop(key, None)
        _SCRATCH[key] = alloc(ctx, (numel,))
    handle, flat = _SCRATCH[key]

    def remote(q: int) -> torch.Tensor:
        return handle.get_buffer(q, shape, ctx.dtype)

    return handle, flat[:numel].view(shape), remote
