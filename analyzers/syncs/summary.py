"""The blocking syncs as the JSON document keeps them: totals, groups and the costliest syncs.

Every sync of every rank is a row of `analyze --tables` (syncs.parquet); the document keeps what a
reader needs at any rank count: the totals (set and per rank), the syncs grouped by rank, API and
caller (what the tables of `analyze` show), and the syncs that idled the GPU most, each list capped
with its full count beside it, so that 128 ranks with thousands of syncs each stay a few kB.
"""

from __future__ import annotations

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


def sync_groups(syncs: dict[int, pd.DataFrame]) -> list[dict[str, Any]]:
    """Syncs grouped by rank, API and caller (first appearance order within a rank): count, host blocked
    and GPU idle (ns), the GPU idle median and the steps they fell in; by rank, most GPU idle first."""
    out: list[dict[str, Any]] = []
    for rank in sorted(syncs):
        df = syncs[rank]
        if not len(df):
            continue
        idle = pd.to_numeric(df["gpu_idle_ns"], errors="coerce")
        step = pd.to_numeric(df["step"], errors="coerce")
        g = pd.DataFrame({"api": df["api"].astype(str).to_numpy(), "caller": _who(df),
                          "host": pd.to_numeric(df["host_blocked_ns"], errors="coerce").fillna(0).to_numpy(),
                          "idle": idle.to_numpy(), "step": step.where(step >= 0).to_numpy()})
        by = g.groupby(["api", "caller"], sort=False)
        agg = pd.DataFrame({"n": by.size(), "host_blocked_ns": by["host"].sum(), "gpu_idle_ns": by["idle"].sum(),
                            "gpu_idle_ns_median": by["idle"].median(), "steps": by["step"].nunique()}).reset_index()
        agg = agg.iloc[np.argsort(-agg["gpu_idle_ns"].to_numpy(), kind="stable")]
        for row in agg.itertuples(index=False):
            med = row.gpu_idle_ns_median
            out.append({"rank": rank, "api": row.api, "caller": row.caller, "n": int(row.n),
                        "host_blocked_ns": int(row.host_blocked_ns), "gpu_idle_ns": int(row.gpu_idle_ns),
                        "gpu_idle_ns_median": None if med != med else float(med), "steps": int(row.steps)})
    return out


def syncs_document(syncs: dict[int, pd.DataFrame]) -> dict[str, Any]:
    """The document's `syncs` section (module docstring)."""
    per_rank = {str(r): {"n": len(df), "host_blocked_ns": _total(df, "host_blocked_ns"),
                         "gpu_idle_ns": _total(df, "gpu_idle_ns")} for r, df in syncs.items()}
    groups = sync_groups(syncs)
    listed = sorted(groups, key=lambda g: -g["gpu_idle_ns"])[:MAX_GROUPS]
    keep = {id(g) for g in listed}
    return {
        "n": int(sum(d["n"] for d in per_rank.values())),
        "host_blocked_ns": int(sum(d["host_blocked_ns"] for d in per_rank.values())),
        "gpu_idle_ns": int(sum(d["gpu_idle_ns"] for d in per_rank.values())),
        "per_rank": per_rank,
        "n_groups": len(groups),
        "groups": [g for g in groups if id(g) in keep],  # rank order, most GPU idle first within a rank
        "rows": _top_rows(syncs),
    }


def _total(df: pd.DataFrame, col: str) -> int:
    return int(pd.to_numeric(df[col], errors="coerce").fillna(0).sum()) if len(df) else 0


def _top_rows(syncs: dict[int, pd.DataFrame]) -> list[dict[str, Any]]:
    """The MAX_ROWS syncs with the most GPU idle (ties: rank, then time), listed by rank and time."""
    cand = []
    for r, df in syncs.items():
        if len(df):
            idle = pd.to_numeric(df["gpu_idle_ns"], errors="coerce").fillna(-1).to_numpy()
            top = np.argsort(-idle, kind="stable")[:MAX_ROWS]
            cand += [(-float(idle[i]), r, int(i)) for i in top.tolist()]
    chosen = sorted(sorted(cand)[:MAX_ROWS], key=lambda c: (c[1], c[2]))
    return [row for _, r, i in chosen for row in rows(syncs[r].iloc[i:i + 1])]
