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
from analyzers.timeline import grouped_intervals as gi


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


def detect_front_loaded(view: RankView) -> list[Finding]:
    """Most of an iteration's collectives of one kind run before its compute starts.

    Silent on: pipelines whose first step's collective precedes compute (one collective,
    or less than front_min_share of that kind), collectives after compute (DDP), tiny
    collectives before compute, iterations without compute (or whose compute kernels all have
    zero length).
    """
    p, t = view.params, view.trace
    rows = _window_rows(view)
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


def _window_rows(view: RankView) -> list[dict]:
    """Per (window, device) with communication and compute: when compute starts, the communication
    before it, and the collective kind most run before it. All windows at once (grouped interval
    algebra): linear in the rows the windows hold, whatever the number of steps."""
    p = view.params
    kinds, kind_names = comm_kind_numbered(view)
    kind_names = np.r_[kind_names, np.nan]  # code -1: no kind (a missing collective name)
    wl = view.windows
    lo_w, hi_w = wl["lo"].to_numpy(np.int64), wl["hi"].to_numpy(np.int64)
    steps = wl["step"].to_numpy(np.int64)
    w, r = view.window_rows(lo_w, hi_w)
    dev_pos = {d: i for i, d in enumerate(view.devices())}
    n_dev = max(len(dev_pos), 1)
    dpos = np.array([dev_pos[int(d)] for d in view.device], dtype=np.int64) if len(view.device) else \
        np.zeros(0, dtype=np.int64)
    cell = w * n_dev + dpos[r]  # one group per (window, device), in window then device order
    n_cells = lo_w.size * n_dev
    lo, hi = lo_w[w], hi_w[w]
    cs, ce = np.clip(view.s[r], lo, hi), np.clip(view.e[r], lo, hi)
    comp, comm = view.compute[r], view.comm[r]
    comp_total = gi.union_length(cell[comp], cs[comp], ce[comp], n_cells)
    has_comm = np.bincount(cell[comm], minlength=n_cells) > 0
    live = (comp_total > 0) & has_comm
    c_start_cell = gi.time_reaching(cell[comp], cs[comp], ce[comp], p.front_compute_start_share * comp_total,
                                    n_cells)
    # communication of every kind before compute starts
    cm_cell, c_end = cell[comm], c_start_cell[cell[comm]]
    before_all = gi.union_length(cm_cell, np.clip(view.s[r[comm]], lo[comm], c_end),
                                 np.clip(view.e[r[comm]], lo[comm], c_end), n_cells)
    # per (cell, kind): its time, its time before compute starts, its count and count started before
    k_code, k_cell = kinds[r[comm]], cm_cell
    pair, pair_index = np.unique(np.stack([k_cell, k_code]), axis=1, return_inverse=True)
    pair_index = pair_index.ravel()
    n_pairs = pair.shape[1]
    total = gi.union_length(pair_index, cs[comm], ce[comm], n_pairs)
    before = gi.union_length(pair_index, np.clip(cs[comm], lo[comm], c_end), np.clip(ce[comm], lo[comm], c_end),
                             n_pairs)
    n_kind = np.bincount(pair_index, minlength=n_pairs)
    n_before = np.bincount(pair_index, weights=(view.s[r[comm]] < c_end), minlength=n_pairs).astype(np.int64)
    share = np.where(total > 0, before / np.maximum(total, 1), 0.0)
    qualifies = (share >= p.front_min_share) & (n_before >= p.front_min_collectives)
    out: list[dict] = []
    if not n_pairs:
        return out
    heads = np.flatnonzero(np.r_[True, pair[0, 1:] != pair[0, :-1]])
    for a, b in zip(heads.tolist(), np.r_[heads[1:], n_pairs].tolist(), strict=True):
        c = int(pair[0, a])
        if not live[c]:
            continue
        q = np.flatnonzero(qualifies[a:b])
        j = a + (int(q[0]) if q.size else int(np.argmax(share[a:b])))
        win, c_start = c // n_dev, int(c_start_cell[c])
        x_lo, x_hi = int(lo_w[win]), int(hi_w[win])
        best = {"kind": str(kind_names[pair[1, j]]), "share": float(share[j]), "n_before": int(n_before[j]),
                "n_kind": int(n_kind[j]), "before_ns": int(before[j]), "kind_ns": int(total[j])}
        front = (best["share"] >= p.front_min_share and best["n_before"] >= p.front_min_collectives
                 and c_start - x_lo >= p.front_min_window_share * (x_hi - x_lo)
                 and int(before_all[c]) >= p.front_min_comm_share * (x_hi - x_lo))
        out.append({"step": int(steps[win]), "lo": x_lo, "hi": x_hi, "compute_start_ns": c_start,
                    "comm_before_ns": int(before_all[c]), "front": front, **best})
    return out


def detect(view: RankView, context: RankContext) -> list[Finding]:
    """The registry's entry point: detect_front_loaded with what it needs from the rank's context."""
    return detect_front_loaded(view)
