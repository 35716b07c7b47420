"""GEMM+RS `tuned`, barrier "kcat": the operand exchange with one GEMM over the concatenated K.

Why: at the grid shapes where the reduce-scatter alone takes three quarters of the GEMM (32768 ×
4096 × 8192 bf16, 8192 × 4096 × 32768 fp16) every schedule that moves output blocks or adds the
peers' terms in a second GEMM's epilogue stayed at 1.06-1.11 × the GEMM alone on 2 × H200. The
operand exchange ("inputs") moves less, but its second pass reads and writes the output block again
(1.02 × the GEMM alone with no communication at all); one GEMM over the whole K writes it once
and runs 0.96-0.97 × the GEMM alone (benchmarks/kcat_probe.py). It needs the peers' operands first,
so a head of the block (its first rows, or for a large B its first columns) is computed as "inputs"
does (own term while the operands travel, the peers' terms added in the epilogue) and the rest by
one GEMM over K.

Layout of a receive slot (per parity): A_cat [rows, K], whose column block q holds rank q's A rows for
this rank (placed by a 2-D copy-engine copy, runners/cuda_copy.py), then B_cat [K, N], whose row
block q holds rank q's B shard. Each rank writes its own blocks into its own slot locally.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from runners.autotune import Schedule
from runners.cuda_copy import copy_2d
from runners.streams import Marker, Streams, region


def kcat_step(builder: Any, sched: Schedule) -> Callable[[int], torch.Tensor]:
    """One iteration of a kcat schedule (copy engine only): a head in two passes, the rest in one GEMM.

    barrier "kcat": the head is the block's first rows/chunks rows (the peers' A rows arrive first);
    "kcat-n": its first N/chunks columns (for a large B: the head needs only that part of each B shard).
    `builder`: the gemm_rs_tuned.TunedGemmRs whose workload and receive slots it uses."""
    wl, ctx = builder.wl, builder.wl.ctx
    D, N, K, kp, r, rows = wl.D, wl.N, wl.K, wl.kp, ctx.rank, builder.rows
    by_rows = sched.barrier == "kcat"
    h = (rows if by_rows else N) // sched.chunks
    head = (slice(0, h), slice(None)) if by_rows else (slice(None), slice(0, h))  # of the output block
    rest = (slice(h, None), slice(None)) if by_rows else (slice(None), slice(h, None))
    peers = [(r + j) % D for j in range(1, D)]
    a_rows = wl.a.view(D, rows, kp)
    handle, recv, remote_of = builder._recv_slots((2, rows * K + K * N), True)
    out = torch.empty(2, rows, N, device=ctx.device, dtype=ctx.dtype)
    copies = Streams(ctx, 2, priority=sched.priority)  # lane 0: to the peers; lane 1: the own blocks
    syncs = Streams(ctx, 1, priority=sched.priority)
    ready, head_pushed, rest_pushed, own_placed = Marker(ctx), Marker(ctx), Marker(ctx), Marker(ctx)
    head_synced, rest_synced = Marker(ctx), Marker(ctx)
    remote = {q: remote_of(q) for q in peers}

    def slot(buf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return buf[: rows * K].view(rows, K), buf[rows * K:].view(K, N)

    def blk(q: int) -> slice:
        return slice(q * kp, (q + 1) * kp)

    def push(par: int, part: tuple[slice, slice]) -> None:
        """This rank's operands that `part` of each peer's block needs, into the peers' slots."""
        for q in peers:
            a_dst, b_dst = slot(remote[q][par])
            if by_rows:
                copy_2d(a_dst[part[0], blk(r)], a_rows[q][part[0]])
            else:
                copy_2d(b_dst[blk(r), part[1]], wl.b[:, part[1]])

    def send(par: int) -> None:
        with copies.on(0), region("tuned kcat: operands to the peers (head first)"):
            ready.wait()
            for q in peers:  # what every part needs: B shards (by rows) or A rows (by columns)
                a_dst, b_dst = slot(remote[q][par])
                if by_rows:
                    b_dst[blk(r)].copy_(wl.b)
                else:
                    copy_2d(a_dst[:, blk(r)], a_rows[q])
            push(par, head)
            head_pushed.record()
            push(par, rest)
            rest_pushed.record()
        with copies.on(1), region("tuned kcat: own operands into the slot"):
            ready.wait()
            a_cat, b_cat = slot(recv[par])
            b_cat[blk(r)].copy_(wl.b)
            copy_2d(a_cat[rest[0], blk(r)], a_rows[r][rest[0]])
            own_placed.record()
        with syncs.on(0), region("tuned kcat: barriers, operands arrived"):
            head_pushed.wait()
            handle.barrier(channel=0)  # our head operands are in the peers' slots, theirs in ours
            head_synced.record()
            rest_pushed.wait()
            handle.barrier(channel=0)
            rest_synced.record()

    def step(par: int) -> torch.Tensor:
        ready.record()
        send(par)
        a_cat, b_cat = slot(recv[par])
        o = out[par]
        with region("tuned kcat: head, own term"):
            torch.mm(a_rows[r][head[0]], wl.b[:, head[1]], out=o[head])
        head_synced.wait()
        for q in peers:
            with region(f"tuned kcat: head, term of rank {q}"):
                o[head].addmm_(a_cat[head[0], blk(q)], b_cat[blk(q), head[1]])  # beta = 1: summed in the epilogue
        rest_synced.wait()
        own_placed.wait()
        with region("tuned kcat: the rest, one GEMM over K"):
            torch.mm(a_cat[rest[0]], b_cat[:, rest[1]], out=o[rest])
        copies.join_all()
        syncs.main_waits(0)
        return o

    return step


def offered(wl: Any, moves_less: bool) -> list[Schedule]:
    """kcat candidates where the operands move less than the output blocks: a head of 1/2 or 1/4 of the
    block's rows ("kcat") or columns ("kcat-n")."""
    if not moves_less:
        return []
    rows = wl.M // wl.D
    return [Schedule("ce", s, -1, b, g) for b, n in (("kcat", rows), ("kcat-n", wl.N)) for s in (2, 4)
            if n % s == 0 for g in (False, True)]
