"""front-loaded-collectives: an iteration's collectives of one kind run before its compute."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.findings.finding import CatalogueEntry, Finding
from analyzers.findings.view import (
    RankContext,
    RankView,
    comm_kind_numbered,
    fmt_ms,
    plain,
    severity_of,
)
from analyzers.timeline import intervals as iv


@dataclass(frozen=True)
class Params:
    """Thresholds of front-loaded-collectives (fields of FindingParams)."""

    front_compute_start_share: float = 0.02
    """Compute 'starts' once this share of the iteration's compute time has run, so a few tiny
    preamble kernels (index setup, fills) do not count as the first compute."""
    front_min_share: float = 0.75
    """Share of one collective kind's time (e.g. all-gathers) that runs before compute starts."""
    front_min_collectives: int = 2
    """At least this many collectives of that kind start before compute: one collective ahead of
    its consumer is a pipeline's first step, not front-loading."""
    front_min_window_share: float = 0.05
    """Compute must start at least this share of the iteration's span after the iteration begins:
    collectives up front that delay compute by less cost little."""
    front_min_comm_share: float = 0.01
    """The communication before compute starts must be at least this share of the iteration's
    span: a couple of tiny broadcasts of the batch ahead of compute are not front-loading, however
    late compute starts for other reasons."""
    front_min_iteration_share: float = 0.5
    """Fires when at least this share of iterations is front-loaded."""


ENTRY = CatalogueEntry(
    id='front-loaded-collectives',
    detects="most of an iteration's communication runs before its first compute kernel",
    fix='issue each collective just before its consumer; wait right before use',
    summary="most of an iteration's communication runs before its first compute kernel",
    summary_fix='issue each collective just before its consumer',
    look_alikes=("a pipeline's first collective ahead of its consumer (FSDP2 ZeRO-3), collectives "
                    'after compute (DDP), tiny collectives before compute that starts late for other '
                    'reasons'),
)


def _time_reaching(ms: np.ndarray, me: np.ndarray, amount: float) -> int:
    """First time at which the merged intervals have covered `amount` ns."""
    lens = me - ms
    cum = np.cumsum(lens)
    i = int(np.searchsorted(cum, amount, side="left"))
    i = min(i, ms.size - 1)
    before = cum[i - 1] if i > 0 else 0
    return int(ms[i] + max(amount - before, 0))


def detect_front_loaded(view: RankView) -> list[Finding]:
    """Most of an iteration's collectives of one kind run before its compute starts.

    Silent on: pipelines whose first step's collective precedes compute (one collective,
    or less than front_min_share of that kind), collectives after compute (DDP), tiny
    collectives before compute, iterations without compute (or whose compute kernels all have
    zero length).
    """
    p, t = view.params, view.trace
    # kinds numbered in sorted order, so that looping over the codes goes through them sorted
    kinds, kind_names = comm_kind_numbered(view)
    kind_names = np.r_[kind_names, np.nan]  # code -1: no kind (a missing collective name)
    rows = []
    for w in view.window_list():
        lo, hi = int(w.lo), int(w.hi)
        for d in view.devices():
            on = view.in_range(lo, hi) & (view.device == d)
            cm, cp = on & view.comm, on & view.compute
            if not cm.any() or not cp.any():
                continue
            ps, pe = iv.union(np.clip(view.s[cp], lo, hi), np.clip(view.e[cp], lo, hi))
            if ps.size == 0:  # compute kernels of no length: no compute start to be early for
                continue
            c_start = _time_reaching(ps, pe, p.front_compute_start_share * iv.length((ps, pe)))
            all_before = iv.length(iv.clip(*iv.union(view.s[cm], view.e[cm]), lo, c_start))
            best = None
            for code in np.unique(kinds[cm]):
                k, km = kind_names[code], cm & (kinds == code)
                ks, ke = iv.union(np.clip(view.s[km], lo, hi), np.clip(view.e[km], lo, hi))
                total = iv.length((ks, ke))
                before = iv.length(iv.clip(ks, ke, lo, c_start))
                n_before = int((view.s[km] < c_start).sum())
                share = before / total if total else 0.0
                cand = {"kind": str(k), "share": share, "n_before": n_before, "n_kind": int(km.sum()),
                        "before_ns": before, "kind_ns": total}
                if best is None or share > best["share"]:
                    best = cand
                if share >= p.front_min_share and n_before >= p.front_min_collectives:
                    best = cand
                    break
            front = (best is not None and best["share"] >= p.front_min_share
                     and best["n_before"] >= p.front_min_collectives
                     and c_start - lo >= p.front_min_window_share * (hi - lo)
                     and all_before >= p.front_min_comm_share * (hi - lo))
            rows.append({"step": int(w.step), "lo": lo, "hi": hi, "compute_start_ns": c_start,
                         "comm_before_ns": all_before, "front": front, **(best or {})})
    n_windows = len(view.windows)
    hits = [r for r in rows if r["front"]]
    if not hits or len(hits) < p.front_min_iteration_share * n_windows:
        return []
    before_tot = int(sum(r["comm_before_ns"] for r in hits))
    kinds_hit = sorted({r["kind"] for r in hits})
    evidence = {
        "n_iterations_front_loaded": len(hits),
        "n_iterations": n_windows,
        "collective": kinds_hit[0] if len(kinds_hit) == 1 else kinds_hit,
        "share_before_compute_median": float(np.median([r["share"] for r in hits])),
        "collectives_before_compute_median": float(np.median([r["n_before"] for r in hits])),
        "collectives_of_kind_median": float(np.median([r["n_kind"] for r in hits])),
        "comm_before_compute_ns_total": before_tot,
        "compute_start_offset_ns_median": float(np.median([r["compute_start_ns"] - r["lo"] for r in hits])),
        "per_iteration": [{"step": r["step"], "share": round(r["share"], 4), "n_before": r["n_before"],
                           "comm_before_ns": r["comm_before_ns"]} for r in hits],
    }
    title = (f"rank {t.rank}: {evidence['share_before_compute_median']:.0%} of {kinds_hit[0]} time runs before "
             f"compute starts ({len(hits)}/{n_windows} iterations)")
    explanation = (
        f"In each affected iteration {evidence['collectives_before_compute_median']:g} of "
        f"{evidence['collectives_of_kind_median']:g} {kinds_hit[0]} collectives start before compute does "
        f"({fmt_ms(evidence['compute_start_offset_ns_median'])} into the iteration, median): the program issues its "
        f"collectives and waits for them up front, so {fmt_ms(before_tot / len(hits))} of communication per "
        f"iteration has nothing to hide behind."
    )
    return [Finding(
        id="front-loaded-collectives", severity=severity_of(before_tot, view.span_ns(), p), ranks=[t.rank],
        title=title, explanation=explanation, start_ns=int(hits[0]["lo"]),
        end_ns=int(hits[-1]["compute_start_ns"]), evidence=plain(evidence),
    )]


def detect(view: RankView, context: RankContext) -> list[Finding]:
    """The registry's entry point: detect_front_loaded with what it needs from the rank's context."""
    return detect_front_loaded(view)
