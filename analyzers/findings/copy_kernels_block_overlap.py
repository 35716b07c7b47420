"""copy-kernels-block-overlap: copy kernels next to collectives that nothing hides."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzers.findings.finding import CatalogueEntry, Finding
from analyzers.findings.view import (
    RankContext,
    RankView,
    copy_label,
    fmt_ms,
    fmt_us,
    per_name,
    plain,
    severity_of,
)
from analyzers.timeline import intervals as iv


@dataclass(frozen=True)
class Params:
    """Thresholds of copy-kernels-block-overlap (fields of FindingParams)."""

    copy_adjacent_ns: int = 20_000
    """A copy kernel is 'adjacent' to a collective when it runs within this gap of one (20 µs)."""
    copy_min_share: float = 0.15
    """Exposed adjacent copy time over the exposed comm window (exposed comm + those copies)."""
    copy_min_span_share: float = 0.01
    """The exposed adjacent copies must also be at least this share of the analysed span."""


ENTRY = CatalogueEntry(
    id='copy-kernels-block-overlap',
    detects='pack/unpack copy kernels on the compute stream next to collectives',
    fix='preallocate buckets, use views / interleaved copies',
    summary='pack/unpack copy kernels next to collectives eat the window comm could hide in',
    summary_fix='preallocate buckets, views, interleaved copies',
    look_alikes=("copies hidden under compute, copies far from collectives (an optimizer's), copies on"
                    ' a side stream of their own, copies small next to the exposed communication'),
)


def detect_copy_kernels(view: RankView) -> list[Finding]:
    """Copy kernels next to collectives, on a comm or compute stream, that nothing hides.

    Silent on: copies hidden under compute, copies far from collectives (optimizer, data),
    copies on a side stream of their own, copies small against the exposed communication,
    collectives that all have zero length.
    """
    p, t = view.params, view.trace
    analysed = view.in_windows()
    findings_ev = []
    for d in view.devices():
        on = analysed & (view.device == d)
        cm, cp, cc = on & view.comm, on & view.compute, on & view.copy
        if not cm.any() or not cc.any():
            continue
        busy_streams = np.unique(view.stream[cm | cp])
        cc &= np.isin(view.stream, busy_streams)
        ms, me = iv.union(view.s[cm], view.e[cm])
        if ms.size == 0:  # collectives of no length: no exposed communication for copies to extend
            continue
        near_s, near_e = iv.union(ms - p.copy_adjacent_ns, me + p.copy_adjacent_ns)
        k = np.searchsorted(near_s, view.e, side="left") - 1  # last dilated comm interval starting before end
        kc = np.clip(k, 0, max(near_s.size - 1, 0))
        adjacent = cc & (k >= 0) & (near_e[kc] > view.s)
        if not adjacent.any():
            continue
        comp = iv.union(view.s[cp], view.e[cp])
        copies = iv.union(view.s[adjacent], view.e[adjacent])
        exposed_copy = iv.length(iv.difference(copies, comp))
        exposed_comm = iv.length(iv.difference((ms, me), comp))
        window = exposed_copy + exposed_comm
        share = exposed_copy / window if window else 0.0
        if share < p.copy_min_share or exposed_copy < p.copy_min_span_share * view.span_ns():
            continue
        labels = per_name(view, adjacent, copy_label(p.copy_kernel_pattern))
        durs = pd.Series(view.e[adjacent] - view.s[adjacent])
        top = durs.groupby(labels).agg(["size", "sum"]).sort_values("sum", ascending=False).head(5)
        findings_ev.append({
            "device": d, "n_copies": int(adjacent.sum()), "copy_ns": iv.length(copies),
            "exposed_copy_ns": exposed_copy, "exposed_comm_ns": exposed_comm, "share_of_exposed_window": share,
            "streams": sorted(np.unique(view.stream[adjacent]).tolist()),
            "top_copies": [{"copy": str(n), "n": int(r["size"]), "ns": int(r["sum"])} for n, r in top.iterrows()],
            "start_ns": int(view.s[adjacent].min()), "end_ns": int(view.e[adjacent].max()),
        })
    out = []
    for ev in findings_ev:
        short = ev["top_copies"][0]["copy"]
        title = (f"rank {t.rank}: copy kernels next to collectives take {ev['share_of_exposed_window']:.0%} of the "
                 f"exposed communication window ({fmt_ms(ev['exposed_copy_ns'])})")
        explanation = (
            f"{ev['n_copies']} copy kernels (mostly {short}) run within {fmt_us(p.copy_adjacent_ns)} of collectives "
            f"on stream(s) {', '.join(map(str, ev['streams']))} and nothing runs under {fmt_ms(ev['exposed_copy_ns'])} "
            f"of them: packing and unpacking sits in the collective's critical path, lengthening the time the "
            f"communication is exposed ({fmt_ms(ev['exposed_comm_ns'])})."
        )
        start, end = ev.pop("start_ns"), ev.pop("end_ns")
        out.append(Finding(id="copy-kernels-block-overlap", severity=severity_of(ev["exposed_copy_ns"],
                                                                                 view.span_ns(), p),
                           ranks=[t.rank], title=title, explanation=explanation, start_ns=start, end_ns=end,
                           evidence=plain(ev)))
    return out


def detect(view: RankView, context: RankContext) -> list[Finding]:
    """The registry's entry point: detect_copy_kernels with what it needs from the rank's context."""
    return detect_copy_kernels(view)
