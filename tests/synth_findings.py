"""Hand-made schedules for the findings tests: each builds the GPU timeline, the host launches
and the host calls of a known pattern (and of its healthy look-alike), in nanoseconds.

All times are chosen so that every expected figure in the tests can be worked out by hand from
the constants here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analyzers.timeline.collectives import collective_names
from analyzers.timeline.model import RankTrace, TraceSet

from .synth import COMM, GEMM, rank_trace

NCCL_STREAM = 20
MAIN_STREAM = 7
ITER = 2_000_000  # iteration pitch on the GPU clock
COPY_IN = "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 1, 128, 1>"
COPY_OUT = "void at::native::split_with_sizes_copy_out_contiguous_no_cast_kernel<float>"
RS = "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


@dataclass
class Builder:
    """Collects kernels (with their launches), host calls and step ranges, then makes a RankTrace."""

    rank: int = 0
    kernels: list[tuple] = field(default_factory=list)
    launches: list[tuple[int, int]] = field(default_factory=list)
    runtime: list[tuple[str, int, int, int]] = field(default_factory=list)
    host_ops: list[tuple[str, int, int]] = field(default_factory=list)
    steps: list[tuple[int, int, int]] = field(default_factory=list)
    sizes: dict[int, int] = field(default_factory=dict)  # correlation -> message size
    corr: int = 100

    def kernel(self, start: int, end: int, stream: int, name: str, launch: int | None = None,
               size: int | None = None, kind: str = "kernel") -> int:
        """Add a GPU activity launched at `launch` (default: early in the current step's host range,
        so it is queued long before the GPU reaches it)."""
        self.corr += 1
        self.kernels.append((start, end, stream, name, kind, self.corr))
        self.launches.append((self.corr, self.steps[-1][1] + 1_000 if launch is None else launch))
        if size is not None:
            self.sizes[self.corr] = size
        return self.corr

    def call(self, name: str, start: int, end: int) -> None:
        self.corr += 1
        self.runtime.append((name, start, end, self.corr))

    def build(self, world_size: int | None = None) -> RankTrace:
        t = rank_trace(self.kernels, rank=self.rank, steps=self.steps, launches=self.launches,
                       host_ops=self.host_ops, runtime=self.runtime, world_size=world_size)
        names = t.names_of(t.gpu["name_id"].to_numpy())
        t.gpu["coll_name"] = collective_names(names)
        corr = t.gpu["correlation"].to_numpy()
        t.gpu["msg_nelems"] = np.array([self.sizes.get(int(c), -1) for c in corr], dtype=np.int64)
        return t


def iteration(b: Builder, i: int) -> int:
    """Iteration i's start (ITER apart, the first at ITER), its ProfilerStep window recorded in b: from
    100 µs before it to 150 µs before the next one."""
    base = (i + 1) * ITER
    b.steps.append((i + 1, base - 100_000, base + ITER - 150_000))
    return base


def pipeline(variant: str, *, iterations: int = 3, steps: int = 4, ag: int = 100_000, mm: int = 150_000,
             rank: int = 0, sync_at: tuple[str, int, int] | None = None, tail_launch: int | None = None,
             ag_name: str = COMM) -> RankTrace:
    """The ag-gemm schedules in miniature: step s all-gathers slice s on the NCCL stream, then its
    matmul runs on worker stream 1 + s % 2.

    overlapped: every all-gather back to back, matmul s after all-gather s and matmul s-1
      (sync-before-loop: all-gather s+1 hides under matmul s).
    serialized: all-gather s+1 waits for matmul s (sync-in-loop: worker waits on main); the host
      issues 2 cudaStreamWaitEvent per step.
    host-sync: serialized, and the host calls cudaStreamSynchronize after launching each matmul;
      the next launch comes 2 µs after the sync returns and starts 8 µs later. The last step's
      sync starts 20 µs after its all-gather ended.
    baseline: one all-gather phase, then one matmul phase on the main stream.
    sync_at: (api, start, end) a host sync per iteration, times relative to the iteration's base.
    tail_launch: a 10 µs tail kernel launched at base + tail_launch on worker stream 2; it starts
      after the last matmul (overlapped variant: base + 700 µs) and at least 8 µs after its launch.
    ag_name: the kernel run as the all-gather (a compute kernel's name: the same schedule without
      communication).
    """
    b = Builder(rank=rank)
    for i in range(iterations):
        base = (i + 1) * ITER
        host0 = base - 100_000
        b.steps.append((i + 1, host0, base + ITER - 150_000))
        if sync_at is not None:
            b.call(sync_at[0], base + sync_at[1], base + sync_at[2])
        if tail_launch is not None:
            tail = max(base + steps * mm + ag, base + tail_launch + 8_000)
            b.kernel(tail, tail + 10_000, 2, GEMM, launch=base + tail_launch)
        if variant == "baseline":
            b.kernel(base, base + steps * ag, NCCL_STREAM, ag_name)
            b.kernel(base + steps * ag, base + steps * (ag + mm), MAIN_STREAM, GEMM)
            continue
        t = base
        mm_end = base
        host = host0
        for s in range(steps):
            worker = 1 + s % 2
            if variant == "overlapped":
                ag_s, ag_e = base + s * ag, base + (s + 1) * ag
                mm_s = max(ag_e, mm_end)
                b.kernel(ag_s, ag_e, NCCL_STREAM, ag_name, launch=host0 + 4_000 * s)
                b.kernel(mm_s, mm_s + mm, worker, GEMM, launch=host0 + 4_000 * s + 2_000)
                mm_end = mm_s + mm
            elif variant == "serialized":
                b.kernel(t, t + ag, NCCL_STREAM, ag_name, launch=host0 + 4_000 * s)
                b.kernel(t + ag, t + ag + mm, worker, GEMM, launch=host0 + 4_000 * s + 2_000)
                b.call("cudaStreamWaitEvent", host0 + 4_000 * s + 500, host0 + 4_000 * s + 900)
                b.call("cudaStreamWaitEvent", host0 + 4_000 * s + 2_500, host0 + 4_000 * s + 2_900)
                t = t + ag + mm + 2_000
            elif variant == "host-sync":
                start = t
                b.kernel(start, start + ag, NCCL_STREAM, ag_name, launch=host)
                b.kernel(start + ag, start + ag + mm, worker, GEMM, launch=host + 3_000)
                sync_end = start + ag + mm + 3_000
                # the last step's sync is called only after its all-gather ended (a slow GEMM
                # launch, as in the real traces): no comm in flight during that call
                sync_start = host + 10_000 if s < steps - 1 else start + ag + 20_000
                b.call("cudaStreamSynchronize", sync_start, sync_end)
                host = sync_end + 2_000
                t = host + 8_000
            else:
                raise ValueError(variant)
    return b.build()


def front_loaded(variant: str, *, iterations: int = 3, layers: int = 6, ag: int = 60_000, fwd: int = 80_000,
                 bwd: int = 160_000, rs: int = 60_000, preamble: bool = True) -> RankTrace:
    """FSDP-like iterations of `layers` blocks.

    front-loaded: all all-gathers run back to back, then the forward of every block, then the
      backward with each block's reduce-scatter beside the next block's backward.
    zero3: all-gather l+1 runs beside the forward of block l (prefetch), the backward all-gathers
      again beside the backward, reduce-scatters as above.
    preamble: a 1 µs fill kernel on the main stream before anything (index setup).
    """
    b = Builder()
    for i in range(iterations):
        base = (i + 1) * 2 * ITER
        b.steps.append((i + 1, base - 100_000, base + 2 * ITER - 150_000))
        t = base
        if preamble:
            b.kernel(t, t + 1_000, MAIN_STREAM, "void at::native::vectorized_elementwise_kernel<4, FillFunctor>")
            t += 2_000
        if variant == "front-loaded":
            for _ in range(layers):
                b.kernel(t, t + ag, NCCL_STREAM, COMM)
                t += ag
            for _ in range(layers):
                b.kernel(t, t + fwd, MAIN_STREAM, GEMM)
                t += fwd
        elif variant == "zero3":
            b.kernel(t, t + ag, NCCL_STREAM, COMM)
            t += ag
            for layer in range(layers):
                if layer + 1 < layers:
                    b.kernel(t, t + ag, NCCL_STREAM, COMM)
                b.kernel(t, t + fwd, MAIN_STREAM, GEMM)
                t += fwd
        else:
            raise ValueError(variant)
        for layer in range(layers):  # backward: reduce-scatter of block l-1 beside block l
            b.kernel(t, t + bwd, MAIN_STREAM, GEMM)
            if variant == "zero3":  # reshard after forward: all-gather again for the backward
                b.kernel(t, t + ag, NCCL_STREAM, COMM)
            if layer:
                b.kernel(t + ag, t + ag + rs, NCCL_STREAM + 1, RS)
            t += bwd
        b.kernel(t, t + rs, NCCL_STREAM + 1, RS)
    return b.build()


def single_collective_then_compute(iterations: int = 3) -> RankTrace:
    """One all-gather, then compute (the non-pipelined baseline): one collective is not front-loading."""
    return pipeline("baseline", iterations=iterations)


def copies(variant: str, *, iterations: int = 3, copy_in: int = 30_000, ag: int = 100_000, copy_out: int = 40_000,
           comp: int = 230_000, copy_stream: int = NCCL_STREAM) -> RankTrace:
    """Pack (copy-in) -> all-gather -> unpack (copy-out) on the NCCL stream, then compute.

    exposed: compute waits for the copy-out, nothing runs beside copies or collective.
    hidden: the previous block's compute runs beside copies and collective (prefetch).
    far: the copies run 1 ms after the collective (optimizer), compute beside nothing.
    copy_stream: the stream the pack / unpack copies run on (exposed and hidden variants).
    """
    b = Builder()
    for i in range(iterations):
        base = iteration(b, i)
        t = base
        if variant == "hidden":
            b.kernel(t, t + copy_in + ag + copy_out, MAIN_STREAM, GEMM)
        if variant == "far":
            b.kernel(t, t + ag, NCCL_STREAM, COMM)
            b.kernel(t + ag, t + ag + comp, MAIN_STREAM, GEMM)
            f = t + 1_000_000
            b.kernel(f, f + copy_in, MAIN_STREAM, COPY_IN)
            b.kernel(f + copy_in, f + copy_in + copy_out, MAIN_STREAM, COPY_OUT)
            continue
        b.kernel(t, t + copy_in, copy_stream, COPY_IN)
        b.kernel(t + copy_in, t + copy_in + ag, NCCL_STREAM, COMM)
        b.kernel(t + copy_in + ag, t + copy_in + ag + copy_out, copy_stream, COPY_OUT)
        t += copy_in + ag + copy_out
        b.kernel(t, t + comp, MAIN_STREAM, GEMM)
    return b.build()


def launch_gaps(variant: str, *, iterations: int = 3, n: int = 8, kern: int = 20_000, gap: int = 30_000,
                late: int = 10_000, tail: str = COMM, launches: bool = True) -> RankTrace:
    """n compute kernels per iteration separated by `gap` idle, then one all-gather.

    launch-bound: each kernel is launched `late` ns after the previous one ended.
    queued: each kernel was launched long before (the GPU waited on a dependency, not on the host).
    tail: the kernel run as the all-gather (a compute kernel's name: no communication at all).
    launches: False drops every launch record (a trace without the runtime's launch calls).
    """
    b = Builder()
    for i in range(iterations):
        base = iteration(b, i)
        t = base
        prev_end = None
        for _ in range(n):
            launch = (prev_end + late) if (variant == "launch-bound" and prev_end is not None) else base - 90_000
            b.kernel(t, t + kern, MAIN_STREAM, GEMM, launch=launch)
            prev_end = t + kern
            t += kern + gap
        b.kernel(t, t + 50_000, NCCL_STREAM, tail, launch=base - 80_000)
    if not launches:
        b.launches.clear()
    return b.build()


def slowed(variant: str, *, n: int = 6, alone: int = 100_000, slow: float = 1.5, size: int = 1 << 20,
           rank: int = 0, peer_lead: int = 0, n_alone: int | None = None, n_over: int | None = None) -> RankTrace:
    """n all-gathers of one size alone, then n under a long matmul.

    contended: the overlapped ones take `slow` times as long.
    equal: they take as long as alone.
    few: contended, but only 2 alone samples.
    mixed-sizes: contended, but the overlapped ones have another size.
    peer_lead: this rank starts its overlapped collectives that much earlier (waits for a late peer),
      their end stays put.
    n_alone, n_over: how many run alone / overlapped (default n each; 2 alone for few).
    """
    b = Builder(rank=rank)
    b.steps.append((1, ITER - 100_000, 20 * ITER))
    t = ITER
    n_alone = (2 if variant == "few" else n) if n_alone is None else n_alone
    n_over = n if n_over is None else n_over
    for _ in range(n_alone):
        b.kernel(t, t + alone, NCCL_STREAM, COMM, size=size)
        t += alone + 50_000
    over = int(alone * (1.0 if variant == "equal" else slow))
    b.kernel(t, t + n * (over + 50_000) + 100_000, MAIN_STREAM, GEMM)
    t += 50_000
    for _ in range(n_over):
        b.kernel(t - peer_lead, t + over, NCCL_STREAM, COMM, size=size * 2 if variant == "mixed-sizes" else size)
        t += over + 50_000
    return b.build(world_size=2 if peer_lead or rank else None)


def starved(variant: str, *, iterations: int = 3, gemm: int = 1_398_000, at: int = 1_300_000,
            comm: int = 4_000) -> RankTrace:
    """Per iteration: a 50 µs kernel on the main stream ends at `base`, then a long GEMM runs on
    the main stream from base + 2 µs; a comm kernel of `comm` ns (4 µs) on the NCCL stream,
    launched long before.

    starved: the comm kernel starts at base + `at`, inside the GEMM (dispatched at its tail).
    first: it starts at base + 1 µs, before the GEMM.
    dependency: it starts 1 µs after the GEMM ends (it waited on the GEMM).
    other-stream: a kernel on stream 9 ends 1 µs before it starts (it may have waited on that).
    late-launch: it starts at base + `at`, but the host launched it only 10 µs before.
    """
    b = Builder()
    for i in range(iterations):
        base = iteration(b, i)
        b.kernel(base - 50_000, base, MAIN_STREAM, GEMM)
        b.kernel(base + 2_000, base + 2_000 + gemm, MAIN_STREAM, GEMM)
        start = {"first": base + 1_000, "dependency": base + 2_000 + gemm + 1_000}.get(variant, base + at)
        if variant == "other-stream":
            b.kernel(base + 10_000, start - 1_000, 9, GEMM)
        launch = start - 10_000 if variant == "late-launch" else None
        b.kernel(start, start + comm, NCCL_STREAM, COMM, launch=launch)
    return b.build()


def trace_set(*traces: RankTrace) -> TraceSet:
    return TraceSet(ranks={t.rank: t for t in traces}, label="synthetic", fmt="synthetic",
                    world_size=len(traces))
