"""Both trace sets' GPU intervals on one time axis (an iteration start), for drawing A over B."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analyzers.diff.rank_metrics import _ranges
from analyzers.timeline.iterations import DEFAULT_STEP_PATTERN, assign_steps, gpu_step_windows, host_steps
from analyzers.timeline.model import TraceSet

# ---------------------------------------------------------------- timelines

def _origin(traces: TraceSet, step: int | None, pattern: str) -> tuple[int, int | None]:
    """Time zero of one variant: the GPU start of `step` (earliest rank), or its first GPU activity."""
    starts = []
    for t in traces:
        w = gpu_step_windows(t, pattern)
        if step is not None and not w.empty:
            w = w[w["step"] == step]
            if not w.empty:
                starts.append(int(w["gpu_start_ns"].min()))
    if starts:
        return min(starts), step
    firsts = [int(t.gpu["start_ns"].min()) for t in traces if not t.gpu.empty]
    return (min(firsts) if firsts else 0), None


def _steps_of(traces: TraceSet, pattern: str) -> list[int]:
    found: set[int] = set()
    for t in traces:
        found |= set(gpu_step_windows(t, pattern)["step"].astype(int).tolist())
    return sorted(found)


def alignment_step(traces_a: TraceSet, traces_b: TraceSet, step: int | None = None,
                   pattern: str = DEFAULT_STEP_PATTERN) -> dict[str, Any]:
    """Which iteration each variant is aligned at: the given step, else the first step both
    have, else each one's first step; with each variant's time zero (ns, own clock)."""
    sa, sb = _steps_of(traces_a, pattern), _steps_of(traces_b, pattern)
    if step is not None:
        if step not in sa or step not in sb:
            raise ValueError(f"step {step} is not in both sets "
                             f"(A: {_ranges(sa) or 'none'}, B: {_ranges(sb) or 'none'})")
        pa = pb = step
    else:
        common = sorted(set(sa) & set(sb))
        pa = pb = common[0] if common else None
        if pa is None:
            pa, pb = (sa[0] if sa else None), (sb[0] if sb else None)
    oa, pa = _origin(traces_a, pa, pattern)
    ob, pb = _origin(traces_b, pb, pattern)
    return {"step_a": pa, "step_b": pb, "origin_ns_a": oa, "origin_ns_b": ob,
            "how": "iteration start" if pa is not None and pb is not None else "first GPU activity"}


def aligned_timelines(traces_a: TraceSet, traces_b: TraceSet, step: int | None = None,
                      labels: tuple[str, str] = ("A", "B"), pattern: str = DEFAULT_STEP_PATTERN,
                      only_step: bool = False) -> pd.DataFrame:
    """GPU intervals of both sets on one time axis, for drawing A over B.

    Columns: variant, rank, device, stream, start_ns, end_ns (relative to the start of the
    aligned iteration's GPU window of each variant, so both start at 0), step (-1 outside
    every step), category, kind, name. Ranks of one variant keep their offsets to each
    other. only_step keeps just the aligned iteration's activities. The alignment used is
    in ``df.attrs["alignment"]``.
    """
    align = alignment_step(traces_a, traces_b, step, pattern)
    frames = []
    for label, traces, side in ((labels[0], traces_a, "a"), (labels[1], traces_b, "b")):
        origin, chosen = align[f"origin_ns_{side}"], align[f"step_{side}"]
        for t in traces:
            gpu = t.gpu
            steps = assign_steps(t, host_steps(t, pattern))
            df = pd.DataFrame({
                "variant": label, "rank": t.rank,
                "device": gpu["device"].to_numpy(), "stream": gpu["stream"].to_numpy(),
                "start_ns": gpu["start_ns"].to_numpy() - origin, "end_ns": gpu["end_ns"].to_numpy() - origin,
                "step": steps, "category": gpu["category"].astype(str).to_numpy(),
                "kind": gpu["kind"].astype(str).to_numpy(),
                "name": t.names_of(gpu["name_id"].to_numpy()) if len(gpu) else np.zeros(0, dtype=object),
            })
            if only_step and chosen is not None:
                df = df[df["step"] == chosen]
            frames.append(df)
    cols = ["variant", "rank", "device", "stream", "start_ns", "end_ns", "step", "category", "kind", "name"]
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame({c: [] for c in cols})
    out = out[cols].sort_values(["variant", "rank", "start_ns"], kind="stable").reset_index(drop=True)
    out.attrs["alignment"] = align
    return out
