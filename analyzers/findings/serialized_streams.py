"""serialized-streams: streams that interleave in time yet never run at once."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzers.findings.finding import CatalogueEntry, Finding, Severity
from analyzers.findings.host_blocking_sync import syncs_in_overlap_region
from analyzers.findings.view import (
    RankContext,
    RankView,
    fmt_ms,
    fmt_us,
    plain,
    severity_of,
)
from analyzers.syncs.blocking import api_base_name, blocking_syncs
from analyzers.syncs.lookups import PerName
from analyzers.timeline import intervals as iv
from analyzers.timeline.constants import NO_TIME
from analyzers.timeline.model import require_host_tables


@dataclass(frozen=True)
class Params:
    """Thresholds of serialized-streams (fields of FindingParams)."""

    serial_min_stream_share: float = 0.10
    """A stream takes part when its busy time is at least this share of the iteration's busy time."""
    serial_max_concurrent_share: float = 0.05
    """'Concurrent time ≈ 0': time with two or more of those streams busy is at most this share of
    the least busy one's time."""
    serial_min_iteration_share: float = 0.5
    """Fires when at least this share of iterations is serialized (one odd iteration is not a schedule)."""


ENTRY = CatalogueEntry(
    id='serialized-streams',
    detects=('work on several streams never runs concurrently because each stream waits for the '
                'previous one'),
    fix='issue all fork waits before the loop; join after it',
    summary=('work on several streams that never runs concurrently because each stream waits for the '
                'previous one'),
    summary_fix='issue all fork waits before the loop; join after',
    look_alikes=('streams that run concurrently at any time, a phase-by-phase baseline (all-gather, '
                    'then GEMM), a single stream'),
)


def _stream_groups(view: RankView, mask: np.ndarray, lo: int, hi: int) -> dict[int, iv.Intervals]:
    """Merged busy intervals per stream of the selected rows, clipped to [lo, hi)."""
    out: dict[int, iv.Intervals] = {}
    sel = view.rows_in(lo, hi)
    sel = sel[mask[sel]]
    if not sel.size:
        return out
    s, e, st = np.clip(view.s[sel], lo, hi), np.clip(view.e[sel], lo, hi), view.stream[sel]
    order = np.argsort(st, kind="stable")
    st_o = st[order]
    cuts = np.flatnonzero(np.diff(st_o)) + 1
    for stream, ss, ee in zip(st_o[np.r_[0, cuts]] if st_o.size else [], np.split(s[order], cuts),
                              np.split(e[order], cuts), strict=True):
        out[int(stream)] = iv.union(ss, ee)
    return out


def _switches(groups: dict[int, iv.Intervals]) -> int:
    """How often the GPU timeline passes from one stream's busy interval to another's."""
    labels = np.concatenate([np.full(g[0].size, k, dtype=np.int64) for k, g in groups.items()])
    starts = np.concatenate([g[0] for g in groups.values()])
    seq = labels[np.argsort(starts, kind="stable")]
    return int((seq[1:] != seq[:-1]).sum())


def detect_serialized_streams(view: RankView, syncs: pd.DataFrame | None = None) -> list[Finding]:
    """Two or more streams with substantial work that interleave in time yet are never busy at once.

    Interleave: the time-ordered busy intervals switch streams at least as many times as there
    are streams (some stream resumes after another ran). Silent on: a non-overlapped baseline
    (one phase per stream per iteration), pipelines where any stream pair runs concurrently, a
    single stream, iterations that host-blocking-sync explains (the host, not a stream
    dependency, serialized them).
    """
    p, t = view.params, view.trace
    work = ~view.other
    syncs = blocking_syncs(t, p.sync) if syncs is None else syncs
    by_host = syncs_in_overlap_region(view, syncs)
    host_steps_hit = set(by_host["region_step"].tolist()) - {-1}
    host_serialized = np.sort(by_host["end_ns"].to_numpy(np.int64))
    per_window = []
    for w in view.window_list():
        if w.step in host_steps_hit or (
                np.searchsorted(host_serialized, w.hi) > np.searchsorted(host_serialized, w.lo)):
            continue
        for d in view.devices():
            groups = _stream_groups(view, work & (view.device == d), int(w.lo), int(w.hi))
            if len(groups) < 2:
                continue
            busy_all = iv.length(iv.union(np.concatenate([g[0] for g in groups.values()]),
                                          np.concatenate([g[1] for g in groups.values()])))
            busy = {k: iv.length(g) for k, g in groups.items()}
            big = {k: g for k, g in groups.items() if busy[k] >= p.serial_min_stream_share * busy_all}
            if len(big) < 2:
                continue
            conc = iv.length(iv.covered_by_at_least(list(big.values()), 2))
            min_busy = min(busy[k] for k in big)
            switches = _switches(big)
            serialized = switches >= len(big) and conc <= p.serial_max_concurrent_share * min_busy
            per_window.append({"step": int(w.step), "device": d, "lo": int(w.lo), "hi": int(w.hi),
                               "host_lo": int(w.host_lo), "host_hi": int(w.host_hi),
                               "streams": sorted(big), "busy": {k: busy[k] for k in sorted(big)},
                               "concurrent_ns": conc, "switches": switches, "serialized": serialized})
    n_windows = len(view.windows)
    hits = [r for r in per_window if r["serialized"]]
    if not hits or len(hits) < p.serial_min_iteration_share * n_windows:
        return []
    streams = sorted({s for r in hits for s in r["streams"]})
    busy_tot = {s: sum(r["busy"].get(s, 0) for r in hits) for s in streams}
    # streams whose communication took time: a comm kernel of start == end hides nothing and loses nothing
    comm_streams = sorted(set(pd.unique(view.stream[view.comm & (view.e > view.s)]).tolist()) & set(streams))
    # the inter-stream waits the host issued inside those iterations (the chain that serializes)
    require_host_tables(t)
    rt = t.runtime
    waits_per_it: dict[int, int] = {}
    if not rt.empty and any(r["host_lo"] != NO_TIME for r in hits):
        # resolved once per distinct runtime name, not once per call
        is_wait = PerName(t, rt["name_id"].to_numpy()).rows(lambda n: api_base_name(n) == "cudaStreamWaitEvent",
                                                             bool)
        ws = np.sort(rt["start_ns"].to_numpy(np.int64)[is_wait])
        for r in hits:
            if r["host_lo"] != NO_TIME:
                waits_per_it[r["step"]] = int(np.searchsorted(ws, r["host_hi"]) - np.searchsorted(ws, r["host_lo"]))
    span_hits = sum(r["hi"] - r["lo"] for r in hits)
    evidence = {
        "n_iterations_serialized": len(hits),
        "n_iterations": n_windows,
        "streams": streams,
        "comm_streams": comm_streams,
        "busy_ns_per_stream": busy_tot,
        "concurrent_ns": int(sum(r["concurrent_ns"] for r in hits)),
        "stream_switches_median": float(np.median([r["switches"] for r in hits])),
        "stream_wait_event_calls_per_iteration": waits_per_it or None,
        "serialized_span_ns": int(span_hits),
    }
    lost = min(busy_tot.values())  # what full concurrency of the two least busy streams could hide
    sev = Severity.critical if comm_streams else severity_of(lost, view.span_ns(), p)
    waits_txt = ""
    median_waits = int(np.median(list(waits_per_it.values()))) if waits_per_it else 0
    if median_waits:
        waits_txt = (f" The host issued {median_waits} cudaStreamWaitEvent calls "
                     f"per iteration inside the loop: these inter-stream waits chain the streams one after another.")
    elif waits_per_it:  # host ranges known, no wait in them: the chain is not made of stream waits
        waits_txt = (" The host issued no cudaStreamWaitEvent inside the loop in most iterations, so what orders "
                     "the streams is something else (host-side waits between launches, or each launch issued "
                     "only after the other stream's work finished).")
    busy_txt = ", ".join(f"stream {s}: {fmt_ms(b)}" for s, b in busy_tot.items())
    title = (f"rank {t.rank}: streams {', '.join(map(str, streams))} interleave but never run concurrently "
             f"({len(hits)}/{n_windows} iterations)")
    explanation = (
        f"Work alternates between streams {', '.join(map(str, streams))} ({busy_txt}) yet "
        + (f"only {fmt_us(evidence['concurrent_ns'])}" if evidence["concurrent_ns"] else "none")
        + " of it ran concurrently: each stream's work waits for the other "
        "stream's, so the multi-stream schedule runs as one serial chain"
        + (" and its communication is never hidden." if comm_streams else ".") + waits_txt
    )
    return [Finding(
        id="serialized-streams", severity=sev, ranks=[t.rank], title=title, explanation=explanation,
        start_ns=int(min(r["lo"] for r in hits)), end_ns=int(max(r["hi"] for r in hits)), evidence=plain(evidence),
    )]


def detect(view: RankView, context: RankContext) -> list[Finding]:
    """The registry's entry point: detect_serialized_streams with what it needs from the rank's context."""
    return detect_serialized_streams(view, context.syncs)
