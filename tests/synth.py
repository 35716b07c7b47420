"""Tiny hand-made traces for tests whose answers are computed by hand."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from analyzers.timeline.classify import classify_trace, load_rules
from analyzers.timeline.model import HOST_OP_COLUMNS, RUNTIME_COLUMNS, NameTable, RankTrace, make_gpu_table, make_table

COMM = "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"


def rank_trace(
    kernels: Iterable[tuple],
    *,
    rank: int = 0,
    steps: Iterable[tuple[int, int, int]] = (),
    launches: Iterable[tuple[int, int]] | None = None,
    host_ops: Iterable[tuple[str, int, int]] = (),
    runtime: Iterable[tuple[str, int, int, int]] = (),
    world_size: int | None = None,
    classify: bool = True,
) -> RankTrace:
    """kernels: (start, end, stream, name[, kind[, correlation]]) in ns; kind defaults to kernel.

    steps: (step number, host start, host end) -> ProfilerStep#N host ops.
    launches: (correlation, host launch time) -> cudaLaunchKernel runtime calls.
    runtime: (name, start, end, correlation) extra runtime calls (syncs).
    """
    names = NameTable()
    rows = [tuple(k) for k in kernels]
    n = len(rows)
    kind = [r[4] if len(r) > 4 else "kernel" for r in rows]
    corr = [r[5] if len(r) > 5 else -1 for r in rows]
    gpu = make_gpu_table(
        n,
        start_ns=[r[0] for r in rows],
        end_ns=[r[1] for r in rows],
        stream=[r[2] for r in rows],
        name_id=[names.intern(r[3]) for r in rows],
        kind=kind,
        correlation=corr,
    ).sort_values("start_ns", kind="stable").reset_index(drop=True)
    ops = [(f"ProfilerStep#{s}", a, b) for s, a, b in steps] + list(host_ops)
    host = make_table(
        HOST_OP_COLUMNS, len(ops),
        start_ns=[o[1] for o in ops], end_ns=[o[2] for o in ops],
        name_id=[names.intern(o[0]) for o in ops],
        kind=np.asarray(["user_annotation"] * len(ops), dtype=object),
    )
    rt_rows = [("cudaLaunchKernel", t, t + 1, c) for c, t in (launches or [])] + list(runtime)
    rt = make_table(
        RUNTIME_COLUMNS, len(rt_rows),
        start_ns=[r[1] for r in rt_rows], end_ns=[r[2] for r in rt_rows],
        name_id=[names.intern(r[0]) for r in rt_rows], correlation=[r[3] for r in rt_rows],
    ).sort_values("start_ns", kind="stable").reset_index(drop=True)
    t = RankTrace(rank=rank, source=f"synthetic-rank{rank}", fmt="synthetic", names=names, gpu=gpu,
                  runtime=rt, host_ops=host, world_size=world_size)
    if classify:
        classify_trace(t, load_rules())
    return t
