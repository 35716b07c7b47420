"""Worker streams, events and named ranges that degrade to no-ops on CPU.

The schedules are written once against these: on CUDA they fork and join streams and
record events; with gloo on CPU the same calls do nothing, so every schedule also runs
(for correctness) on a machine without GPUs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from runners.context import Ctx


class Streams:
    """Worker streams on CUDA; on CPU the same calls are no-ops, so schedules run unchanged."""

    def __init__(self, ctx: Ctx, n: int, priority: int = 0) -> None:
        self.cuda = ctx.cuda
        self.streams: list[torch.cuda.Stream | None] = (
            [torch.cuda.Stream(device=ctx.device, priority=priority) for _ in range(n)] if self.cuda else [None] * n
        )

    def __len__(self) -> int:
        return len(self.streams)

    def on(self, i: int) -> contextlib.AbstractContextManager[Any]:
        s = self.streams[i % len(self.streams)]
        return torch.cuda.stream(s) if s is not None else contextlib.nullcontext()

    def wait_main(self, i: int) -> None:
        """Worker i waits for everything issued so far on the current (main) stream (a fork)."""
        s = self.streams[i % len(self.streams)]
        if s is not None:
            s.wait_stream(torch.cuda.current_stream())

    def main_waits(self, i: int) -> None:
        """The current (main) stream waits for worker i (a join)."""
        s = self.streams[i % len(self.streams)]
        if s is not None:
            torch.cuda.current_stream().wait_stream(s)

    def join_all(self) -> None:
        for i in range(len(self.streams)):
            self.main_waits(i)

    def host_sync(self, i: int) -> None:
        """Block the host until worker i is idle (the anti-pattern host-sync shows)."""
        s = self.streams[i % len(self.streams)]
        if s is not None:
            s.synchronize()


class Marker:
    """Event on CUDA, nothing on CPU (work there is already complete when the call returns)."""

    def __init__(self, ctx: Ctx) -> None:
        self.event = torch.cuda.Event() if ctx.cuda else None

    def record(self) -> None:
        if self.event is not None:
            self.event.record()

    def wait(self) -> None:
        if self.event is not None:
            torch.cuda.current_stream().wait_event(self.event)


_NVTX = False


def set_nvtx(on: bool) -> None:
    """Under Nsight Systems, region() also pushes NVTX ranges."""
    global _NVTX
    _NVTX = on


@contextlib.contextmanager
def region(name: str) -> Iterator[None]:
    """A named range: record_function for torch.profiler, NVTX too under Nsight Systems."""
    if _NVTX:
        torch.cuda.nvtx.range_push(name)
    try:
        with torch.profiler.record_function(name):
            yield
    finally:
        if _NVTX:
            torch.cuda.nvtx.range_pop()
