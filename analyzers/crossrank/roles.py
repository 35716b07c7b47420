"""Stream roles: streams of different ranks that run the same kernels are one role."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzers.crossrank.frames import _Frames, _RankRows
from analyzers.crossrank.report import CrossRankParams

# --------------------------------------------------------------------------- stream roles

def match_stream_roles(frames: _Frames, params: CrossRankParams) -> dict[int, pd.DataFrame]:
    """Role of each (device, stream) of every rank: streams that run the same kernels share one.

    Similarity of two streams = Σ_name min(count_a, count_b) / max(total_a, total_b).
    Greedy best-first assignment; near-ties (role_tie_margin) prefer the same stream id, then
    the same order of first appearance. A stream left without a partner above
    min_role_similarity takes the reference stream of the same id if that one is free;
    otherwise it gets a role of its own (compared with nobody).
    """
    ref = frames.ref
    ref_rows = frames.by_rank[ref]
    ref_streams = ref_rows.streams.copy()
    n_roles = len(ref_streams)
    out: dict[int, pd.DataFrame] = {}
    ref_streams["role"] = np.arange(n_roles)
    ref_streams["similarity"] = 1.0
    out[ref] = ref_streams
    next_role = n_roles
    for r in frames.ranks[1:]:
        rows = frames.by_rank[r]
        streams = rows.streams.copy()
        if streams.empty or ref_streams.empty:
            streams["role"] = np.arange(next_role, next_role + len(streams))
            streams["similarity"] = 0.0
            next_role += len(streams)
            out[r] = streams
            continue
        gnames = np.union1d(ref_rows.name_ids, rows.name_ids)
        a = _count_matrix(ref_rows, gnames)
        b = _count_matrix(rows, gnames)
        sim = np.vstack([np.minimum(a[i][None, :], b).sum(axis=1) for i in range(a.shape[0])]).astype(float)
        sim /= np.maximum(a.sum(axis=1)[:, None], b.sum(axis=1)[None, :]).clip(min=1)
        same_id = ref_streams["stream"].to_numpy()[:, None] == streams["stream"].to_numpy()[None, :]
        appear = np.abs(ref_streams["appear"].to_numpy()[:, None] - streams["appear"].to_numpy()[None, :])
        score = sim + np.where(same_id, params.role_tie_margin, 0.0)
        ii, jj = np.unravel_index(np.lexsort((appear.ravel(), -score.ravel())), score.shape)
        role = np.full(len(streams), -1, dtype=np.int64)
        simil = np.zeros(len(streams))
        taken = np.zeros(n_roles, dtype=bool)
        for i, j in zip(ii, jj, strict=True):  # over stream pairs, not events
            if taken[i] or role[j] >= 0 or sim[i, j] < params.min_role_similarity:
                continue
            taken[i], role[j], simil[j] = True, i, sim[i, j]
        for j in np.flatnonzero(role < 0):  # stream id fallback
            hit = np.flatnonzero(same_id[:, j] & ~taken)
            if hit.size:
                taken[hit[0]], role[j], simil[j] = True, hit[0], sim[hit[0], j]
        for j in np.flatnonzero(role < 0):
            role[j] = next_role
            next_role += 1
        streams["role"] = role
        streams["similarity"] = simil
        out[r] = streams
    return out


def _count_matrix(rows: _RankRows, gnames: np.ndarray) -> np.ndarray:
    """streams × gnames matrix of kernel counts (gnames: sorted, a superset of the rank's names)."""
    mat = np.zeros((len(rows.streams), len(gnames)), dtype=np.int64)
    mat[:, np.searchsorted(gnames, rows.name_ids)] = rows.counts
    return mat


def _attach_roles(frames: _Frames, roles: dict[int, pd.DataFrame]) -> None:
    for r, rows in frames.by_rank.items():
        rows.stream_role = roles[r]["role"].to_numpy(dtype=np.int64)


def _role_labels(roles: dict[int, pd.DataFrame], ref: int) -> dict[int, str]:
    """Role id -> 'stream <its id on the reference rank>'."""
    ref_roles = roles[ref]
    return {int(role): f"stream {int(stream)}" for role, stream in zip(ref_roles["role"], ref_roles["stream"],
                                                                       strict=True)}
