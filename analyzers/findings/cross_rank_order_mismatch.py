"""cross-rank-order-mismatch: ranks start independent kernels in different orders, then wait.

Needs every rank's trace: it reads the order mismatches of the cross-rank report
(analyzers.crossrank.order). Its thresholds are the mismatch_* fields of CrossRankParams.
"""

from __future__ import annotations

from analyzers.crossrank import CrossRankReport, normalized_name
from analyzers.crossrank.report import _plain
from analyzers.findings.finding import CatalogueEntry, Finding, Severity
from analyzers.findings.view import fmt_wait, plural

ENTRY = CatalogueEntry(
    id='cross-rank-order-mismatch',
    detects=('ranks start independent kernels on different streams in different orders; '
                'barriers/collectives then wait for the slowest'),
    fix=('enforce one order: a small delay kernel on the other stream, or an explicit inter-stream '
            'dependency'),
    summary=('ranks start independent kernels in different orders; collectives then wait for the '
                'slowest'),
    summary_fix='enforce one order (a small delay kernel, or an explicit dependency)',
    look_alikes=('swaps that explain no wait, or whose wait is below mismatch_min_wait_ns or '
                    "mismatch_min_wait_fraction of the two ranks' collective kernel time (jitter-level "
                    'swaps)'),
)


def detect_cross_rank(report: CrossRankReport) -> list[Finding]:
    """One finding per pair of ranks whose order swaps explain enough waiting."""
    p = report.params
    findings: list[Finding] = []
    mm = report.mismatches
    if len(mm):
        mm = mm[mm["explains_wait"].to_numpy(dtype=bool)]  # swaps whose delaying rank was the late one
        for rb, grp in mm.groupby("rank_b"):
            wait = int(grp["wait_caused_ns"].sum())
            ra = int(grp["rank_a"].iloc[0])
            comm = sum(report.peer_wait.get(r, {}).get("kernel_ns", 0) for r in (ra, int(rb)))
            share = wait / comm if comm else 0.0
            if wait < p.mismatch_min_wait_ns or share < p.mismatch_min_wait_fraction:
                continue
            sev = Severity.critical if share >= p.mismatch_critical_wait_fraction else Severity.warning
            ex = grp.sort_values("wait_caused_ns", ascending=False).iloc[0]
            kx = f"{normalized_name(ex['kernel_x'])} ({ex['stream_x']})"
            ky = f"{normalized_name(ex['kernel_y'])} ({ex['stream_y']})"
            fa = (kx, ky) if ex["first_on_a"] == "x" else (ky, kx)
            findings.append(Finding(
                id="cross-rank-order-mismatch", severity=sev, ranks=[ra, int(rb)],
                title=f"ranks {ra} and {int(rb)} start kernels of two streams in different orders before "
                      f"{plural(len(grp), 'collective')}, which then waited {fmt_wait(wait)}",
                explanation=(f"e.g. in step {int(ex['step'])}: rank {ra} started {fa[0]} before {fa[1]}, rank "
                             f"{int(rb)} the other way round. The next cross-rank dependency "
                             f"({normalized_name(ex['coll_name'])} on {ex['dependency_stream']}) started late on "
                             f"rank {int(ex['delaying_rank'])}, which had run the other stream's kernel first, and "
                             f"rank {int(ex['waiting_rank'])} waited "
                             f"{fmt_wait(int(ex['wait_caused_ns']))} for it."),
                start_ns=int(min(ex["x_start_ns_a"], ex["y_start_ns_a"])),
                end_ns=int(ex["dependency_start_ns"]),
                evidence={"n_mismatches_explaining_wait": int(len(grp)),
                          "n_mismatches": int((report.mismatches["rank_b"] == rb).sum()),
                          "n_swapped_pairs": int(grp["n_swapped_pairs"].sum()),
                          "wait_caused_ns": wait, "share_of_collective_kernel_time": share,
                          "example": _plain(ex.to_dict())},
            ))
    return findings
