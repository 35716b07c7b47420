"""comm-starved-by-compute: comm kernels dispatched only at the tail of a GEMM holding every SM."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzers.findings.finding import CatalogueEntry, Finding
from analyzers.findings.view import (
    RankContext,
    RankView,
    fmt_ms,
    fmt_us,
    plain,
    severity_of,
)
from analyzers.timeline.constants import NO_TIME
from analyzers.timeline.iterations import launch_times
from analyzers.timeline.kernel_names import normalize_kernel_name


@dataclass(frozen=True)
class Params:
    """Thresholds of comm-starved-by-compute (fields of FindingParams)."""

    starve_min_delay_ns: int = 50_000
    """A communication kernel counts when it started at least this long after it was eligible
    (launched, its stream's earlier work done, and nothing else on the device ended in between that
    it could have waited on): 50 µs is far beyond a dispatch latency of a few µs."""
    starve_blocker_slack_ns: int = 20_000
    """The compute kernel that held the SMs started no later than this after the comm kernel was
    eligible (it won the dispatch), and was still running when the comm kernel started."""
    starve_min_total_ns: int = 100_000
    """The finding needs at least this much starved delay in total (100 µs)."""


ENTRY = CatalogueEntry(
    id='comm-starved-by-compute',
    detects=('communication kernels ready long before they started, dispatched only at the tail of a '
                'compute kernel that took every SM (stream priority does not preempt)'),
    fix=('make the comm kernel dispatch first (the compute waits on a short gate kernel of the comm '
            'stream, then a few µs), move the transfer to the copy engine, or leave SMs free (SM '
            'carve-out) where the GEMM honours it'),
    summary=('a comm kernel eligible long before it started, dispatched only at the tail of a GEMM '
                'holding every SM'),
    summary_fix='dispatch the comm kernel first (gate the GEMM), copy engine, SM carve-out',
    look_alikes=('comm kernels whose start a dependency explains (something else ended just before), '
                    'comm kernels launched late by the host, copies, a gated schedule (ag-gemm/tuned)'),
)


def _running_max_before(starts: np.ndarray, ends: np.ndarray, at: np.ndarray, *, inclusive: bool
                        ) -> tuple[np.ndarray, np.ndarray]:
    """For each time in `at`: the latest end among rows starting before it (at or before it when
    inclusive; NO_TIME when none), and that row's position in `starts` (-1 when none). `starts` must be sorted."""
    if starts.size == 0:
        return np.full(at.size, NO_TIME, dtype=np.int64), np.full(at.size, -1, dtype=np.int64)
    run_max = np.maximum.accumulate(ends)
    arg = np.maximum.accumulate(np.where(ends == run_max, np.arange(ends.size), 0))
    pos = np.searchsorted(starts, at, side="right" if inclusive else "left") - 1
    found = pos >= 0
    pos_c = np.clip(pos, 0, None)
    return np.where(found, run_max[pos_c], NO_TIME), np.where(found, arg[pos_c], -1)


def starved_comm_kernels(view: RankView) -> pd.DataFrame:
    """Communication kernels that waited for a compute kernel's SMs rather than for a dependency.

    A comm kernel could have started once it was launched, its stream's earlier work had ended,
    and whatever it waited on had ended. Event waits are not in the trace, so the last activity
    on the device that ended before its start stands in for them (a lower bound on the wait it
    did not need): *eligible* = max(launch, earlier work on its stream, last end before its
    start). It counts when it started starve_min_delay_ns or more after that, while a compute
    kernel on another stream, started by then (give or take starve_blocker_slack_ns), still ran;
    of those, the one that ran longest past the comm kernel's start is named. Copies (copy
    engine) are left out: they need no SMs; so are comm kernels of zero length (start == end: they
    took no time, no evidence of a held-back transfer). A comm kernel before which nothing recorded on its
    device had ended is left out too: what it waited on may predate the trace (censored). Sorted
    running maxima per stream keep this O(n log n). Columns: device, stream, start_ns, eligible_ns,
    delay_ns, name, blocker, blocker_end_ns.
    """
    p, t = view.params, view.trace
    cols = ["device", "stream", "start_ns", "eligible_ns", "delay_ns", "name", "blocker", "blocker_end_ns"]
    is_kernel = (t.gpu["kind"] == "kernel").to_numpy()
    launch = launch_times(t)
    analysed = view.in_windows()
    rows = []
    for d in view.devices():
        # Candidates come from the analysed windows; what they could have waited on (earlier work,
        # last end, blockers) from the whole device, so a window's edge hides no dependency.
        idx = np.flatnonzero(view.device == d)
        # a comm kernel of start == end took no time: nothing to starve (no evidence either way)
        took_time = view.e[idx] > view.s[idx]
        cand = idx[analysed[idx] & view.comm[idx] & is_kernel[idx] & (launch[idx] != NO_TIME) & took_time]
        if cand.size == 0:
            continue
        prev_end = np.full(cand.size, NO_TIME, dtype=np.int64)  # end of the earlier work on its stream
        for k in np.unique(view.stream[cand]):
            on_k = idx[view.stream[idx] == k]
            on_k = on_k[np.argsort(view.s[on_k], kind="stable")]
            here = view.stream[cand] == k
            prev_end[here] = _running_max_before(view.s[on_k], view.e[on_k], view.s[cand[here]], inclusive=False)[0]
        ends = np.sort(view.e[idx], kind="stable")
        before = np.searchsorted(ends, view.s[cand], side="left")
        last_end = np.where(before > 0, ends[np.clip(before - 1, 0, None)], NO_TIME)
        eligible = np.maximum.reduce([launch[cand], prev_end, last_end])
        delay = view.s[cand] - eligible
        # Nothing recorded on the device ended before it: what it waited on may predate the trace.
        keep = (delay >= p.starve_min_delay_ns) & (last_end != NO_TIME)
        cand, eligible, delay = cand[keep], eligible[keep], delay[keep]
        comp = idx[view.compute[idx]]
        for k in np.unique(view.stream[cand]):
            other = comp[view.stream[comp] != k]
            other = other[np.argsort(view.s[other], kind="stable")]
            here = np.flatnonzero(view.stream[cand] == k)
            latest_end, at = _running_max_before(view.s[other], view.e[other],
                                                 eligible[here] + p.starve_blocker_slack_ns, inclusive=True)
            for j, end, a in zip(here, latest_end, at, strict=True):
                i = cand[j]
                if end <= view.s[i]:
                    continue  # nothing on another stream was still running when it started
                blocker = other[a]
                rows.append({"device": d, "stream": int(view.stream[i]), "start_ns": int(view.s[i]),
                             "eligible_ns": int(eligible[j]), "delay_ns": int(delay[j]),
                             "name": normalize_kernel_name(str(view.names[i])),
                             "blocker": normalize_kernel_name(str(view.names[blocker])),
                             "blocker_end_ns": int(view.e[blocker])})
    return pd.DataFrame(rows, columns=cols).sort_values(["device", "start_ns"], ignore_index=True)


def detect_comm_starved(view: RankView) -> list[Finding]:
    """Comm kernels dispatched only at the tail of a compute kernel that held every SM.

    Silent on: delays a dependency can explain (something else ended just before the start),
    copies, comm kernels without launch records or of zero length, and small totals.
    """
    p, t = view.params, view.trace
    starved = starved_comm_kernels(view)
    total = int(starved["delay_ns"].sum()) if not starved.empty else 0
    if starved.empty or total < p.starve_min_total_ns:
        return []
    span = view.span_ns()
    worst = starved.sort_values("delay_ns", ascending=False).head(5)
    blockers = starved.groupby("blocker")["delay_ns"].agg(["size", "sum"]).sort_values("sum", ascending=False)
    top = str(blockers.index[0])
    evidence = {
        "n_kernels": int(len(starved)),
        "delay_ns_total": total,
        "delay_ns_median": float(starved["delay_ns"].median()),
        "blockers": [{"name": str(n), "n": int(r["size"]), "delay_ns": int(r["sum"])}
                     for n, r in blockers.head(3).iterrows()],
        "largest": [{"name": str(r.name), "stream": int(r.stream), "start_ns": int(r.start_ns),
                     "delay_ns": int(r.delay_ns), "started_before_blocker_end_ns": int(r.blocker_end_ns - r.start_ns)}
                    for r in worst.itertuples(index=False)],
    }
    w = worst.iloc[0]
    title = (f"rank {t.rank}: {len(starved)} comm kernel{'s' if len(starved) > 1 else ''} waited {fmt_ms(total)} "
             f"for SMs held by {top}")
    explanation = (
        f"{w['name']} on stream {int(w['stream'])} was eligible (launched, its stream idle, and nothing that ended "
        f"later on the GPU for it to wait on) {fmt_us(w['delay_ns'])} before "
        f"it started, and started {fmt_us(w['blocker_end_ns'] - w['start_ns'])} before {w['blocker']} ended: it was "
        f"dispatched only when that kernel's CTAs began to retire. A kernel that fills every SM keeps any kernel "
        f"queued after it waiting, whatever the stream priority; the communication behind it starts late and its "
        f"peers wait for it."
    )
    return [Finding(id="comm-starved-by-compute", severity=severity_of(total, span, p), ranks=[t.rank], title=title,
                    explanation=explanation, start_ns=int(starved["eligible_ns"].min()),
                    end_ns=int(starved["start_ns"].max()), evidence=plain(evidence))]


def detect(view: RankView, context: RankContext) -> list[Finding]:
    """The registry's entry point: detect_comm_starved with what it needs from the rank's context."""
    return detect_comm_starved(view)
