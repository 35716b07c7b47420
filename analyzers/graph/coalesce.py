"""The `coalesce` fix: the send and receive of one ring step run as one kernel (``batch_isend_irecv``).

On each rank, consecutive point-to-point kernels of one stream pair up (first with second, third with fourth):
the second of each pair takes no time, its cross-rank join is dissolved, and the first carries both transfers
after the join of its own collective.

How long one kernel carrying both directions takes follows from how NCCL runs it (src/device/sendrecv.h, NCCL
2.19 and later): a block serving one peer gives a lone send or receive ``w`` of its warps (all but one of
``n = block threads / 32`` past four: ``w = send + recv``), and a send with a receive ``send`` and ``recv``
of them (``recv = (n - 1) // 2``, ``send = recv + 1``; ``n // 2`` each up to four warps). A direction's
measured transfer ``t`` of ``B`` bytes is taken as the link's time ``B / L`` (``L``: the GPU's link peak per
direction, crossrank.link_peaks) plus what the warps' copying adds on top, ``t - B / L``; on its share of the
warps that part grows as ``w / share``. Both directions run at once on their own half of the warps and their
own direction of the link, so the kernel takes the longer of

    B / L + (t - B / L) * w / recv

over its two directions (each given the receive's share, the smaller: the kernel's name does not say which of
the two was the send). Two limits bracket it: a transfer at the link's peak is not slowed (the longer of the
two transfers: directions wholly in parallel), one far below it takes ``w / recv`` times as long (about twice:
the warps shared). Where the link peak (an unknown GPU model), a message size or the block size is unknown, the
kernel takes the longer transfer, the optimistic limit, and the note counts those exchanges.
"""

from __future__ import annotations

import numpy as np

from analyzers.graph.fixes import ReplayInputs, own
from analyzers.graph.set_graph import SetGraph
from analyzers.timeline.sm_resources import RES_COLUMNS

P2P_KINDS = ("SendRecv", "Send", "Recv", "sendrecv")
WARP = 32
_BLOCK_THREADS = RES_COLUMNS.index("block_threads")


def nccl_p2p_warps(block_threads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(warps a lone send or receive gets, warps the receive gets beside a send) of an NCCL point-to-point block
    serving one peer, per block size (NCCL's sendrecv.h); 0 where the block size is unknown."""
    n = np.maximum(np.asarray(block_threads, dtype=np.int64), 0) // WARP
    recv = np.where(n <= 4, n // 2, (n - 1) // 2)
    send = np.where(n <= 4, recv, recv + 1)
    return send + recv, recv


def coalesced_ns(t_a: np.ndarray, t_b: np.ndarray, bytes_a: np.ndarray, bytes_b: np.ndarray,
                 link_gbps: np.ndarray, block_threads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per exchange: (the one kernel's transfer in ns, whether the model applied; else the longer transfer).
    Durations in ns, bytes, link peak in GB/s (one byte per ns); unknown sizes -1, unknown link 0."""
    t_a, t_b = np.asarray(t_a, dtype=np.int64), np.asarray(t_b, dtype=np.int64)
    alone, share = nccl_p2p_warps(block_threads)
    link = np.asarray(link_gbps, dtype=np.float64)
    ok = (link > 0) & (np.asarray(bytes_a) >= 0) & (np.asarray(bytes_b) >= 0) & (share > 0)
    grow = np.where(ok, alone / np.maximum(share, 1), 1.0)

    def one(t: np.ndarray, b: np.ndarray) -> np.ndarray:
        on_link = np.minimum(np.where(ok, np.maximum(b, 0) / np.where(link > 0, link, 1.0), 0.0), t)
        return on_link + (t - on_link) * grow

    both = np.maximum(one(t_a, np.asarray(bytes_a)), one(t_b, np.asarray(bytes_b)))
    return np.where(ok, np.round(both), np.maximum(t_a, t_b)).astype(np.int64), ok


def _per_node(sg: SetGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node of the set: message bytes (-1), its rank's link peak (0), its block size (-1)."""
    nbytes = np.full(sg.n, -1, dtype=np.int64)
    link = np.zeros(sg.n, dtype=np.float64)
    threads = np.full(sg.n, -1, dtype=np.int64)
    for r in sg.ranks:
        g, b = sg.graphs[r], sg.base[r]
        rows = slice(b, b + g.n)
        if len(g.msg_bytes) == g.n:
            nbytes[rows] = g.msg_bytes
        link[rows] = float(g.link_gbps)
        if len(g.res_id) == g.n and len(g.res):
            rid = g.res_id.astype(np.int64)
            threads[rows] = np.where(rid >= 0, g.res[np.maximum(rid, 0), _BLOCK_THREADS], -1)
    return nbytes, link, threads


def _pairs(sg: SetGraph, p2p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first, second): per rank, consecutive point-to-point kernels back to back on one stream."""
    first, second = [], []
    for r in sg.ranks:
        rows = np.flatnonzero(p2p & (sg.rank_of == r))
        rows = rows[np.argsort(sg.start[rows], kind="stable")]
        k = 0
        while k + 1 < len(rows):
            a, b = int(rows[k]), int(rows[k + 1])
            if sg.prev[b] == a:  # back to back on one stream: one exchange
                first.append(a)
                second.append(b)
                k += 2
            else:
                k += 1
    return np.asarray(first, dtype=np.int64), np.asarray(second, dtype=np.int64)


def coalesce(sg: SetGraph, inp: ReplayInputs, names: np.ndarray) -> tuple[dict[str, np.ndarray], list[str]]:
    """The graph's new collectives (coll, coll_ptr, coll_nodes) with each exchange's two kernels merged into the
    first, and the note; inp's durations and offsets are changed in place."""
    p2p = (sg.coll >= 0) & np.asarray([any(k in str(n) for k in P2P_KINDS) for n in names], dtype=bool)
    a, b = _pairs(sg, p2p)
    nbytes, link, threads = _per_node(sg)
    dur, modelled = coalesced_ns(inp.dur[a], inp.dur[b], nbytes[a], nbytes[b], link[a], threads[a])
    longer = np.maximum(inp.dur[a], inp.dur[b])
    inp.dur[a] = dur
    inp.dur[b] = 0
    own(inp, "off")[b] = np.minimum(inp.off[b], inp.off[a])
    second = np.zeros(sg.n, dtype=bool)
    second[b] = True
    sizes = np.diff(sg.coll_ptr)
    gone = np.add.reduceat(second[sg.coll_nodes].astype(np.int64), sg.coll_ptr[:-1]) == sizes if len(sizes) else sizes
    gone &= sizes > 0
    keep_c = np.flatnonzero(~gone)
    remap = np.full(len(sizes), -1, dtype=np.int64)
    remap[keep_c] = np.arange(len(keep_c))
    coll = np.where(sg.coll >= 0, remap[np.maximum(sg.coll, 0)], -1)
    nodes = [sg.coll_nodes[sg.coll_ptr[c]:sg.coll_ptr[c + 1]] for c in keep_c.tolist()]
    ptr = np.r_[0, np.cumsum([len(x) for x in nodes])].astype(np.int64)
    cnodes = np.concatenate(nodes).astype(np.int64) if nodes else np.zeros(0, dtype=np.int64)
    mixed = int((second & (coll >= 0)).sum())
    note = f"coalesce: {int(gone.sum())} point-to-point exchanges merged into the one before them"
    if modelled.any():
        alone, share = nccl_p2p_warps(threads[a[modelled]])
        note += (f"; each kernel carries both directions on NCCL's split of its warps ({int(np.median(share))} of "
                 f"{int(np.median(alone))} per direction) at up to {np.median(link[a[modelled]]):g} GB/s per "
                 f"direction: {np.median(dur[modelled]) / 1e3:.1f} µs median where the longer transfer took "
                 f"{np.median(longer[modelled]) / 1e3:.1f} µs")
    if (~modelled).any():
        note += (f"; {int((~modelled).sum())} exchanges without a known link peak, message size or block size take "
                 "their longer transfer (an optimistic limit)")
    if mixed:
        note += f"; {mixed} second kernels whose collective also holds a first one stay joined"
    return {"coll": coll, "coll_ptr": ptr, "coll_nodes": cnodes}, [note]
