"""What every front end shows of the dependency graph's answers in words: a finding's price and the
critical-path rows (per step, per rank); the figures are in viz/critical_figures.py.

Reads the ``critical_path`` section of a report (analyzers.graph.analysis.critical_path_section)
and the findings' ``saving_ns``; the CLI, the app and the HTML report render these the same way. No
Plotly here: the CLI's tables import this module on the base install, which has none.
"""

from __future__ import annotations

from typing import Any

from .formats import ms, pct

PART_LABELS = {
    "compute": "compute", "comm_transfer": "exposed transfer", "peer_wait": "peer wait",
    "launch_gaps": "launch gaps", "sync_idle": "blocking-sync idle", "copies": "copies / memsets", "other": "other",
}
STEP_HEADER = ["step", "slowest rank", "replayed ms", *PART_LABELS.values(), "late rank (cause)"]
FIDELITY_HEADER = ["step", "measured ms", "replayed ms", "error"]


def saving_text(saving_ns: int | None, fraction: float | None) -> str:
    """'fixing this saves ≈ 1.800 ms per step (34.0%)', or '' when the finding is not priced."""
    if saving_ns is None:
        return ""
    if saving_ns <= 0:
        return "fixing this alone saves nothing per step (replay)"
    return f"fixing this saves ≈ {ms(saving_ns)} ms per step ({pct(fraction)})"


def _late(step: dict[str, Any]) -> str:
    return "; ".join(f"rank {p['late_rank']} {ms(p['ns'])} ms ({p['cause']})" for p in step.get("peer_wait", [])[:3])


def step_rows(cp: dict[str, Any]) -> list[list[str]]:
    """One row per step: the slowest rank's critical path, its parts in ms."""
    return [[str(s["step"]), str(s["rank"]), ms(s["replayed_ns"]), *(ms(s["parts"][k]) for k in PART_LABELS),
             _late(s)] for s in cp.get("steps", [])]


def bound_lines(bounds: list[dict[str, Any]], step_ns: int) -> list[str]:
    """Each part the attribution charged less than the walk gave it, in words (analyzers.graph.attribution):
    what removing it saves and what bounds the rest of its time."""
    def pc(ns: int) -> str:
        return f"{100 * ns / step_ns:.1f} %" if step_ns else "n/a"

    out = []
    for b in bounds:
        moved = {k: v for k, v in b["moved_ns"].items() if pc(v) != pc(0)}
        rest = ", ".join(f"{PART_LABELS[k]} {pc(v)}" for k, v in sorted(moved.items(), key=lambda kv: -kv[1]))
        if b["left_ns"]:
            rest = (rest + ", " if rest else "") + f"other {pc(b['left_ns'])} ({b['left_by']})"
        out.append(f"{PART_LABELS[b['part']]} {pc(b['walked_ns'])} of the path; removing it ({b['removal']}) "
                   f"shortens the step by {pc(max(b['saving_ns'], 0))}; the rest is bound by "
                   f"{rest or 'nothing over 0.1 %'}")
    return out


def bound_rows(cp: dict[str, Any]) -> list[str]:
    """'step N (rank r): ...' for every step whose attribution moved time off a cause part."""
    return [f"step {s['step']} (rank {s['rank']}): {line}" for s in cp.get("steps", [])
            for line in bound_lines(s.get("bounds", []), s["replayed_ns"])]


def steps_caption(cp: dict[str, Any]) -> str:
    """Where the report lists only its slowest steps (a long trace), how many of how many."""
    shown, n = len(cp.get("steps", [])), cp.get("n_steps", len(cp.get("steps", [])))
    return "" if n <= shown else (f"the {shown} slowest of {n} steps shown; every step: analyze --tables "
                                  "(critical_steps.parquet)")


def fidelity_caption(cp: dict[str, Any]) -> str:
    f = cp["fidelity"]
    shown, n = len(f["steps"]), f.get("n_steps", len(f["steps"]))
    return "" if n <= shown else f"the {shown} steps of {n} with the largest error shown"


def fidelity_rows(cp: dict[str, Any]) -> list[list[str]]:
    return [[str(s["step"]), ms(s["measured_ns"]), ms(s["replayed_ns"]),
             pct(s["error"]) if s["error"] is not None else "n/a"] for s in cp["fidelity"]["steps"]]


def fidelity_line(cp: dict[str, Any]) -> str:
    f = cp["fidelity"]
    err = pct(f["median_abs_error"]) if f["median_abs_error"] is not None else "n/a"
    return (f"replay of the unmodified graph: step {ms(f['replayed_step_ns'])} ms against {ms(f['measured_step_ns'])}"
            f" ms measured (median error {err}, target {pct(f['target'])})")
