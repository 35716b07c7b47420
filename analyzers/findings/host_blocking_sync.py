"""host-blocking-sync: the host blocks on the GPU inside the overlapped region."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzers.findings.finding import CatalogueEntry, Finding
from analyzers.findings.view import (
    NO_CALLER,
    RankContext,
    RankView,
    fmt_ms,
    fmt_us,
    plain,
    severity_of,
)
from analyzers.syncs.blocking import blocking_syncs
from analyzers.syncs.device_busy import busy_before
from analyzers.timeline import intervals as iv
from analyzers.timeline.constants import NO_TIME


@dataclass(frozen=True)
class Params:
    """Thresholds of host-blocking-sync (fields of FindingParams)."""

    sync_min_idle_ns: int = 5_000
    """A sync counts when the GPU idle it caused is at least this (5 µs: more than a launch
    latency; below, the GPU still had queued work and the sync cost nothing)."""
    sync_min_total_idle_ns: int = 20_000
    """The finding needs at least this much caused idle over all counted syncs (20 µs)."""


ENTRY = CatalogueEntry(
    id='host-blocking-sync',
    detects='the host blocks on the GPU inside the overlapped region; the GPU drains',
    fix='wait on an event (cudaStreamWaitEvent / stream.wait_event) instead of synchronizing the host',
    summary='the host blocks on the GPU inside the overlapped region; the GPU drains',
    summary_fix='wait on an event instead of synchronizing the host',
    look_alikes=("syncs before or after all of an iteration's communication (a loss.item() at step "
                    "end), syncs that leave the GPU busy with queued work, the profiler's own sync, "
                    'traces without communication'),
)


def charged_idle(syncs: pd.DataFrame) -> np.ndarray:
    """The GPU idle each sync can have caused: the idle after it (gpu_idle_ns), at most as long as
    the call held the host (host_blocked_ns). Without the call the host would have gone on that much
    earlier and no more, so its next launch could have come at most that much sooner: idle beyond
    it is the host's own delay after the call returned (a launch-bound gap), not the sync's."""
    return np.minimum(syncs["gpu_idle_ns"].to_numpy(np.int64), syncs["host_blocked_ns"].to_numpy(np.int64))


def syncs_in_overlap_region(view: RankView, syncs: pd.DataFrame) -> pd.DataFrame:
    """The blocking syncs that cost overlap, with region_step (the iteration they belong to).

    A sync is *in the overlapped region* when it starts between an iteration's first and last
    comm kernel, or while comm is in flight on its device during the call. With iteration
    ranges, every sync of an iteration that has one such sync counts (the sync after the last
    step's collective blocks the same pipeline; whether that collective had just ended when the
    host got there is timing), and syncs outside the analysed iterations (the profiler's own
    cudaDeviceSynchronize at the end) never count. A sync after which nothing is launched (at the
    very end of the recorded work) is never in the region: there is nothing left to overlap.
    Each counted sync caused at least sync_min_idle_ns of GPU idle (charged_idle: a call that held
    the host 3 µs is not charged the 100 µs the host then took to launch more).
    """
    # host-blocking-sync and serialized-streams both ask, with the same syncs: computed once per view
    kept, found = view.memo("syncs_in_overlap_region", lambda: (syncs, _syncs_in_overlap_region(view, syncs)))
    return (found if kept is syncs else _syncs_in_overlap_region(view, syncs)).copy()


def _syncs_in_overlap_region(view: RankView, syncs: pd.DataFrame) -> pd.DataFrame:
    p = view.params
    if syncs.empty or not view.comm.any() or view.windows.empty:
        return syncs.iloc[0:0].assign(region_step=np.zeros(0, dtype=np.int64))
    start = syncs["start_ns"].to_numpy(np.int64)
    end = syncs["end_ns"].to_numpy(np.int64)
    dev = syncs["device"].to_numpy(np.int64)
    in_region = np.zeros(start.size, dtype=bool)
    region_step = np.full(start.size, -1, dtype=np.int64)
    w = view.windows
    for d in view.devices():
        cm = view.comm & (view.device == d)
        ms, me = iv.union(view.s[cm], view.e[cm])
        on = dev == d
        # comm in flight at some point of the host call
        in_flight = (busy_before(ms, me, end[on] + 1) - busy_before(ms, me, start[on])) > 0
        # between the first and the last comm kernel of its iteration (GPU clock)
        reg_lo = np.full(len(w), NO_TIME, dtype=np.int64)
        reg_hi = np.full(len(w), NO_TIME, dtype=np.int64)
        for i, (lo, hi) in enumerate(zip(w["lo"].to_numpy(), w["hi"].to_numpy(), strict=True)):
            sel = view.rows_in(int(lo), int(hi))
            sel = sel[cm[sel]]
            if sel.size:
                reg_lo[i], reg_hi[i] = max(int(view.s[sel].min()), int(lo)), min(int(view.e[sel].max()), int(hi))
        order = np.argsort(reg_lo, kind="stable")
        rl, rh, rs = reg_lo[order], reg_hi[order], w["step"].to_numpy()[order]
        k = np.searchsorted(rl, start[on], side="right") - 1
        kc = np.clip(k, 0, max(rl.size - 1, 0))
        between = (k >= 0) & (rl[kc] != NO_TIME) & (start[on] < rh[kc])
        in_region[on] = (in_flight | between) & (syncs["next_gpu_start_ns"].to_numpy(np.int64)[on] != NO_TIME)
        region_step[on] = np.where(between, rs[kc], -1)
    idle_ok = charged_idle(syncs) >= p.sync_min_idle_ns
    host_step = syncs["step"].to_numpy(np.int64)
    steps = w["step"].to_numpy(np.int64)
    if (steps >= 0).any() and (w["host_lo"].to_numpy() != NO_TIME).any():
        in_steps = np.isin(host_step, steps[steps >= 0])
        hit_steps = np.unique(host_step[in_region & in_steps & idle_ok])
        counted = np.isin(host_step, hit_steps) & in_steps & idle_ok
        region_step = host_step
    else:
        counted = in_region & idle_ok
    return syncs[counted].assign(region_step=region_step[counted])


def detect_host_blocking_sync(view: RankView, syncs: pd.DataFrame | None = None) -> list[Finding]:
    """Blocking syncs in the overlapped region (syncs_in_overlap_region) that left the GPU idle.

    Silent on: iterations whose syncs all come before / after their communication (loss.item()
    at the end of a step), syncs that leave the GPU busy (queued work), the profiler's own sync
    after the last step, traces without communication. The idle it reports is charged_idle: what
    the syncs can have caused, never more than each held the host.
    """
    p, t = view.params, view.trace
    syncs = blocking_syncs(t, p.sync) if syncs is None else syncs
    c = syncs_in_overlap_region(view, syncs).copy()
    idle_after = int(c["gpu_idle_ns"].sum())
    c["gpu_idle_ns"] = charged_idle(c)
    if c.empty or c["gpu_idle_ns"].sum() < p.sync_min_total_idle_ns:
        return []
    c["step"] = np.where(c["step"] >= 0, c["step"], c["region_step"])
    per_step = c[c["step"] >= 0].groupby("step").size()
    total_idle = int(c["gpu_idle_ns"].sum())
    who = (c["sync_op"].where(c["sync_op"] != "", c["caller"]).where(lambda x: x != "", c["annotation"])
           .where(lambda x: x != "", c["frame"]).replace("", NO_CALLER))
    callers = (c.assign(who=who).groupby("who").agg(n=("api", "size"), gpu_idle_ns=("gpu_idle_ns", "sum"))
               .sort_values("gpu_idle_ns", ascending=False).head(5))
    apis = c.groupby("api").size().sort_values(ascending=False)
    n_steps = int(per_step.size)
    per_it = float(per_step.median()) if n_steps else None
    evidence = {
        "n_syncs": int(len(c)),
        "n_iterations_with_syncs": n_steps,
        "n_iterations": int(len(view.windows)),
        "syncs_per_iteration_median": per_it,
        "syncs_per_iteration": {int(k): int(v) for k, v in per_step.items()},
        "gpu_idle_ns_total": total_idle,
        "gpu_idle_ns_median": float(c["gpu_idle_ns"].median()),
        "gpu_idle_ns_after_syncs_total": idle_after,  # the syncs table's idle, before charged_idle's cap
        "host_blocked_ns_total": int(c["host_blocked_ns"].sum()),
        "share_of_span": total_idle / view.span_ns() if view.span_ns() else None,
        "apis": {str(k): int(v) for k, v in apis.items()},
        "callers": [{"caller": str(k), "n": int(r.n), "gpu_idle_ns": int(r.gpu_idle_ns)}
                    for k, r in callers.iterrows()],
        "n_blocking_syncs_all": int(len(syncs)),
    }
    top = callers.index[0] if len(callers) else NO_CALLER
    from_txt = f" (mostly from {top})" if top != NO_CALLER else ""
    per_txt = f" ({per_it:g} per iteration)" if per_it is not None else ""
    title = (f"rank {t.rank}: {len(c)} blocking host syncs{per_txt} inside the overlapped region left the GPU "
             f"idle {fmt_ms(total_idle)}")
    explanation = (
        f"The host called {', '.join(apis.index[:3])}{from_txt} while communication was in flight "
        f"or still to come in the iteration. Each call blocks the host until the GPU finishes, so nothing new "
        + (f"is queued: the GPU drains and sits idle for {fmt_us(evidence['gpu_idle_ns_median'])} (median) until the "
           f"next launch arrives" if idle_after == total_idle else
           f"is queued: the GPU drains and sits idle until the next launch arrives, {fmt_ms(total_idle)} of it the "
           f"syncs' doing ({fmt_us(evidence['gpu_idle_ns_median'])} median; no more than each call held the host: the "
           f"other {fmt_ms(idle_after - total_idle)} of idle after them is the host's own delay once they returned)")
        + ", and the collectives that should overlap with compute run alone."
    )
    return [Finding(
        id="host-blocking-sync", severity=severity_of(total_idle, view.span_ns(), p), ranks=[t.rank],
        title=title, explanation=explanation,
        start_ns=int(c["start_ns"].min()), end_ns=int(c["end_ns"].max()), evidence=plain(evidence),
    )]


def detect(view: RankView, context: RankContext) -> list[Finding]:
    """The registry's entry point: detect_host_blocking_sync with what it needs from the rank's context."""
    return detect_host_blocking_sync(view, context.syncs)
