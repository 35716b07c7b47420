"""The blocking syncs as the JSON document keeps them: totals, groups and the costliest syncs.

Every sync of every rank is a row of `analyze --tables` (syncs.parquet); the document keeps what a
reader needs at any rank count: the totals (set and per rank), the syncs grouped by rank, API and
caller (what the tables of `analyze` show), and the syncs that idled the GPU most, each list capped
with its full count beside it, so that 128 ranks with thousands of syncs each stay a few kB.

Each rank's part (RankSyncSummary: its totals, its first MAX_GROUPS groups, its MAX_ROWS costliest syncs as
rows) is all the section needs of that rank: `analyze` makes it in the per-rank worker, beside the syncs, so
the caller merges small summaries instead of walking every rank's syncs again (0.05-0.1 s a rank of 5,200).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analyzers.io.plain import rows

MAX_GROUPS = 64  # sync groups (rank, API, caller) listed, most GPU idle first
MAX_ROWS = 32  # single syncs listed, most GPU idle first
_WHO = ("sync_op", "caller", "annotation", "frame")  # what a sync is filed under: the first one set


def _who(df: pd.DataFrame) -> np.ndarray:
    """Per sync: the sync-implying op, else its caller, annotation or frame, else '-'."""
    out = np.full(len(df), "-", dtype=object)
    for key in reversed(_WHO):
        if key in df:
            v = df[key].astype(object).to_numpy()
            has = np.asarray([isinstance(x, str) and x != "" for x in v], dtype=bool)
            out[has] = v[has]
    return out


@dataclass
class RankSyncSummary:
    """What the document's `syncs` section needs of one rank (module docstring)."""

    n: int
    host_blocked_ns: int
    gpu_idle_ns: int
    groups: list[dict[str, Any]]  # its first MAX_GROUPS groups, most GPU idle first (sync_groups' order)
    n_groups: int
    top: list[tuple[float, int, dict[str, Any]]]  # (-GPU idle, row index, row) of its MAX_ROWS costliest syncs


def rank_sync_summary(rank: int, df: pd.DataFrame) -> RankSyncSummary:
    """One rank's part of the section, from its blocking syncs."""
    groups = _rank_groups(rank, df) if len(df) else []
    top: list[tuple[float, int, dict[str, Any]]] = []
    if len(df):
        idle = pd.to_numeric(df["gpu_idle_ns"], errors="coerce").fillna(-1).to_numpy()
        picked = np.argsort(-idle, kind="stable")[:MAX_ROWS].tolist()
        top = [(-float(idle[i]), int(i), row) for i, row in zip(picked, rows(df.iloc[picked]), strict=True)]
    return RankSyncSummary(len(df), _total(df, "host_blocked_ns"), _total(df, "gpu_idle_ns"), groups[:MAX_GROUPS],
                           len(groups), top)


def _rank_groups(rank: int, df: pd.DataFrame) -> list[dict[str, Any]]:
    """One rank's syncs grouped by API and caller (first appearance order), most GPU idle first."""
    idle = pd.to_numeric(df["gpu_idle_ns"], errors="coerce")
    step = pd.to_numeric(df["step"], errors="coerce")
    g = pd.DataFrame({"api": df["api"].astype(str).to_numpy(), "caller": _who(df),
                      "host": pd.to_numeric(df["host_blocked_ns"], errors="coerce").fillna(0).to_numpy(),
                      "idle": idle.to_numpy(), "step": step.where(step >= 0).to_numpy()})
    by = g.groupby(["api", "caller"], sort=False)
    agg = pd.DataFrame({"n": by.size(), "host_blocked_ns": by["host"].sum(), "gpu_idle_ns": by["idle"].sum(),
                        "gpu_idle_ns_median": by["idle"].median(), "steps": by["step"].nunique()}).reset_index()
    agg = agg.iloc[np.argsort(-agg["gpu_idle_ns"].to_numpy(), kind="stable")]
    out = []
    for row in agg.itertuples(index=False):
        med = row.gpu_idle_ns_median
        out.append({"rank": rank, "api": row.api, "caller": row.caller, "n": int(row.n),
                    "host_blocked_ns": int(row.host_blocked_ns), "gpu_idle_ns": int(row.gpu_idle_ns),
                    "gpu_idle_ns_median": None if med != med else float(med), "steps": int(row.steps)})
    return out


def sync_groups(syncs: Mapping[int, pd.DataFrame]) -> list[dict[str, Any]]:
    """Syncs grouped by rank, API and caller (first appearance order within a rank): count, host blocked
    and GPU idle (ns), the GPU idle median and the steps they fell in; by rank, most GPU idle first."""
    return [g for rank in sorted(syncs) if len(df := syncs[rank]) for g in _rank_groups(rank, df)]


def syncs_document(syncs: Mapping[int, pd.DataFrame],
                   summaries: Mapping[int, RankSyncSummary] | None = None) -> dict[str, Any]:
    """The document's `syncs` section (module docstring); summaries: ranks' parts made before (the others are
    made here, one rank's syncs at a time)."""
    parts = {r: summaries[r] if summaries is not None and r in summaries else rank_sync_summary(r, syncs[r])
             for r in syncs}
    per_rank = {str(r): {"n": p.n, "host_blocked_ns": p.host_blocked_ns, "gpu_idle_ns": p.gpu_idle_ns}
                for r, p in parts.items()}
    groups = [g for r in sorted(parts) for g in parts[r].groups]  # rank order, most GPU idle first within a rank
    listed = sorted(groups, key=lambda g: -g["gpu_idle_ns"])[:MAX_GROUPS]
    keep = {id(g) for g in listed}
    # the MAX_ROWS syncs with the most GPU idle (ties: rank, then time), listed by rank and time
    cand = sorted(((idle, r, i, row) for r, p in parts.items() for idle, i, row in p.top),
                  key=lambda c: c[:3])[:MAX_ROWS]
    return {
        "n": int(sum(d["n"] for d in per_rank.values())),
        "host_blocked_ns": int(sum(d["host_blocked_ns"] for d in per_rank.values())),
        "gpu_idle_ns": int(sum(d["gpu_idle_ns"] for d in per_rank.values())),
        "per_rank": per_rank,
        "n_groups": sum(p.n_groups for p in parts.values()),
        "groups": [g for g in groups if id(g) in keep],
        "rows": [row for *_, row in sorted(cand, key=lambda c: (c[1], c[2]))],
    }


def _total(df: pd.DataFrame, col: str) -> int:
    return int(pd.to_numeric(df[col], errors="coerce").fillna(0).sum()) if len(df) else 0
