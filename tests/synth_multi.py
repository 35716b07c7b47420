"""Hand-made multi-rank traces for the cross-rank tests.

Kernels are written on one *true* timeline (µs-scale ns); each rank records them on its
own clock, true - offset, so the offset that aligns rank r back is +offset[r]. Answers
(offsets, late ranks, waits, swapped kernels) are therefore known by construction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from analyzers.timeline.collectives import collective_names
from analyzers.timeline.model import TraceSet

from .synth import GEMM, rank_trace

US = 1_000  # ns per µs
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
ALLGATHER = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
BARRIER = "void c10d::symmetric_memory::barrier_kernel(unsigned int**, unsigned long, int, int)"
PTOP = "Memcpy PtoP (Device -> Device)"
GEMM_B = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64_backend"
SLEEP = "at::cuda::(anonymous namespace)::spin_kernel(long)"
TWO_STREAM_BASE = 100 * US  # times stay positive: a launch time below 0 reads as "unknown"


@dataclass
class K:
    """One GPU activity on the true timeline (ns)."""

    start: int
    end: int
    stream: int
    name: str
    kind: str = "kernel"
    pg: str = ""
    seq: int = -1


@dataclass
class RankSpec:
    kernels: list[K]
    offset: int = 0  # recorded = true - offset
    hostname: str = ""
    steps: list[tuple[int, int, int]] = field(default_factory=list)  # (step, true lo, true hi)


def trace_set(specs: dict[int, RankSpec], *, world_size: int | None = None, fmt: str = "synthetic") -> TraceSet:
    """A TraceSet of one rank trace per spec, each on its own (offset) clock."""
    ranks = {}
    for r, spec in specs.items():
        off = spec.offset
        ks = sorted(spec.kernels, key=lambda k: k.start)
        rows = [(k.start - off, k.end - off, k.stream, k.name, k.kind, i) for i, k in enumerate(ks)]
        steps = [(s, lo - off, hi - off) for s, lo, hi in spec.steps]
        launches = [(i, k.start - off) for i, k in enumerate(ks)] if steps else None
        t = rank_trace(rows, rank=r, steps=steps, launches=launches, world_size=world_size)
        # rank_trace sorts by start (stable): correlation = index into ks
        corr = t.gpu["correlation"].to_numpy()
        t.gpu["pg"] = np.asarray([ks[c].pg for c in corr], dtype=object)
        t.gpu["seq"] = np.asarray([ks[c].seq for c in corr], dtype=np.int64)
        t.gpu["coll_name"] = collective_names(t.names_of(t.gpu["name_id"].to_numpy()))
        t.hostname = spec.hostname
        t.fmt = fmt
        t.source = f"synthetic-rank{r}.json"
        ranks[r] = t
    return TraceSet(ranks=ranks, label="synthetic", fmt=fmt, world_size=world_size)


def collective_run(
    n_ranks: int,
    *,
    arrivals: dict[int, list[int]],
    offsets: dict[int, int] | None = None,
    hostnames: dict[int, str] | None = None,
    n_colls: int = 6,
    period: int = 1_000 * US,
    transfer: int = 100 * US,
    name: str = ALLREDUCE,
    compute: Iterable[tuple[int, int]] = (),
    base: int = 0,
) -> tuple[TraceSet, dict[str, Any]]:
    """Every rank: one collective per period on stream 1 and a GEMM per period on stream 0.

    arrivals[r][i] = how late rank r starts collective i after the period start (true time).
    All ranks end collective i together: period start + max arrival + transfer.
    compute: extra (start, end) of GEMMs relative to each period start (default: [0, 300 µs)).
    base: true time of the first period (e.g. epoch nanoseconds, as Kineto records them).
    Returns the TraceSet and the truth: per collective the late rank and per rank wait.
    """
    offsets = offsets or {}
    hostnames = hostnames or {}
    comp = list(compute) or [(0, 300 * US)]
    specs: dict[int, RankSpec] = {}
    truth_wait = {r: 0 for r in range(n_ranks)}
    late = []
    for i in range(n_colls):
        arr = [arrivals[r][i] for r in range(n_ranks)]
        late.append(int(np.argmax(arr)))
        for r in range(n_ranks):
            truth_wait[r] += max(arr) - arr[r]
    for r in range(n_ranks):
        ks = []
        for i in range(n_colls):
            t0 = base + 10 * US + i * period
            last = max(arrivals[q][i] for q in range(n_ranks))
            ks.append(K(t0 + arrivals[r][i], t0 + last + transfer, 1, name))
            ks += [K(t0 + a, t0 + b, 0, GEMM) for a, b in comp]
        specs[r] = RankSpec(ks, offset=offsets.get(r, 0), hostname=hostnames.get(r, ""))
    return trace_set(specs), {"late": late, "wait": truth_wait, "transfer": transfer, "n": n_colls}


def two_stream_run(
    *,
    swap_ranks: Iterable[int] = (1,),
    swap_steps: Iterable[int] = (0,),
    n_steps: int = 3,
    with_barrier: bool = True,
    jitter: int = 0,
    n_ranks: int = 2,
    sleep: bool = False,
    near_tie: int | None = None,
    stream_ids: dict[int, tuple[int, int]] | None = None,
) -> TraceSet:
    """The symm-mem two-stream schedule in miniature, per step (true time, period 1 ms):

    backend stream 9: GEMM_B producer [0,100) µs, then BARRIER, then a PtoP copy
    main stream 7:    GEMM producer  [100,200) µs, then BARRIER, then a PtoP copy
    On ranks in swap_ranks and steps in swap_steps the GPU ran main's producer first:
    GEMM [0,100), GEMM_B [100,200). A barrier needs both ranks: it ends 10 µs after the last
    rank's barrier starts. with_barrier=False drops barriers and copies (no dependency).
    jitter: rank 1's main producer starts this much earlier (the order stays: no swap).
    near_tie: both producers run concurrently for 200 µs from the step start; rank 0 starts
    main's near_tie ns after backend's, rank 1 the other way round: an order flip of near_tie.
    sleep: a SLEEP kernel on main first (no swaps then).
    stream_ids: per rank (main, backend) stream ids as recorded (roles stay main/backend).
    """
    swap_ranks, swap_steps = set(swap_ranks), set(swap_steps)
    period, p = 1_000 * US, 100 * US  # steps start at TWO_STREAM_BASE + s * period
    specs = {}
    starts: dict[tuple[int, int, int], int] = {}
    for r in range(n_ranks):
        for s in range(n_steps):
            t0 = TWO_STREAM_BASE + s * period
            swapped = r in swap_ranks and s in swap_steps and not sleep
            b_prod, m_prod = _producers(r, t0, p, swapped, jitter, near_tie)
            starts[(r, s, 9)], starts[(r, s, 7)] = b_prod[1], m_prod[1]
    for r in range(n_ranks):
        ks: list[K] = []
        for s in range(n_steps):
            t0 = TWO_STREAM_BASE + s * period
            swapped = r in swap_ranks and s in swap_steps and not sleep
            b_prod, m_prod = _producers(r, t0, p, swapped, jitter, near_tie)
            if sleep:
                ks.append(K(t0 - 5 * US, t0 - 4 * US, 7, SLEEP))
            ks += [K(*b_prod, 9, GEMM_B), K(*m_prod, 7, GEMM)]
            if with_barrier:
                for stream in (9, 7):
                    bs = starts[(r, s, stream)]
                    be = max(starts[(q, s, stream)] for q in range(n_ranks)) + 10 * US
                    ks += [K(bs, be, stream, BARRIER), K(be, be + 50 * US, stream, PTOP, "memcpy")]
        main_id, back_id = (stream_ids or {}).get(r, (7, 9))
        ks = [replace(k, stream={7: main_id, 9: back_id}[k.stream]) for k in ks]
        specs[r] = RankSpec(ks, hostname="gpuhost", steps=[(s + 1, TWO_STREAM_BASE + s * period - 50 * US,
                                                            TWO_STREAM_BASE + (s + 1) * period - 50 * US)
                                                           for s in range(n_steps)])
    return trace_set(specs, world_size=n_ranks)


def _producers(r: int, t0: int, p: int, swapped: bool, jitter: int,
               near_tie: int | None) -> tuple[tuple[int, int], tuple[int, int]]:
    """(backend, main) producer intervals of rank r in the step starting at t0."""
    if near_tie is not None:
        first, second = (t0, t0 + 2 * p), (t0 + near_tie, t0 + 2 * p)
        return (second, first) if r == 1 else (first, second)
    if swapped:
        return (t0 + p, t0 + 2 * p), (t0, t0 + p)
    return (t0, t0 + p), (t0 + p - (jitter if r == 1 else 0), t0 + 2 * p)
