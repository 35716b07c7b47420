"""late-peer: a rank's collectives mostly wait for one late peer (a straggler).

Needs every rank's trace: it reads the cross-rank report (analyzers.crossrank). Its thresholds
are the late_peer_* fields of CrossRankParams, chosen with the rest of the cross-rank analysis.
"""

from __future__ import annotations

from analyzers.crossrank import CrossRankReport
from analyzers.findings.finding import CatalogueEntry, Finding, Severity
from analyzers.findings.view import fmt_wait, plural

ENTRY = CatalogueEntry(
    id='late-peer',
    detects="a rank's collectives mostly wait for a late peer (straggler)",
    fix="fix the straggler's cause",
    summary="a rank's collectives mostly wait for a late peer; names the straggler",
    summary_fix="fix the straggler's cause",
    look_alikes=("peers' wait below late_peer_min_wait_ns or late_peer_min_wait_fraction of their "
                    'collective kernel time (jitter), two ranks taking turns at arriving last; a wait that ran '
                    "(with the transfer after it) beside the waiting ranks' own compute is info only: it costs "
                    'no overlap'),
)


def detect_cross_rank(report: CrossRankReport) -> list[Finding]:
    """One finding per late rank whose peers' waiting passes the CrossRankParams thresholds."""
    p = report.params
    findings: list[Finding] = []
    cols = report.collectives
    for late in report.late_ranks:
        lr = late["rank"]
        waiters = []
        exposed = 0
        for r, tot in report.peer_wait.items():
            w = tot["wait_for_rank_ns"].get(str(lr), 0)
            if r != lr and tot["kernel_ns"]:
                waiters.append((r, w, w / tot["kernel_ns"]))
                exposed += tot.get("exposed_for_rank_ns", {}).get(str(lr), w)
        strong = [(r, w, f) for r, w, f in waiters if f >= p.late_peer_min_wait_fraction]
        caused = sum(w for _, w, _ in waiters)
        if not strong or caused < p.late_peer_min_wait_ns or late["share_of_late_collectives"] < p.late_peer_min_share:
            continue
        worst_frac = max(f for _, _, f in strong)
        sev = Severity.critical if worst_frac >= p.late_peer_critical_fraction else Severity.warning
        # Waiting that ran beside the waiting ranks' own compute cost no time (seen on the tuned gemm-rs,
        # whose barriers spin on a side stream under a GEMM): still real, so reported, but as info.
        hidden = exposed < p.late_peer_min_wait_ns
        if hidden:
            sev = Severity.info
        sig = cols[cols["late_rank"] == lr]
        wr = ", ".join(f"rank {r} {f:.0%}" for r, _, f in strong)
        findings.append(Finding(
            id="late-peer", severity=sev, ranks=[lr] + [r for r, _, _ in strong],
            title=f"rank {lr} arrives last at {plural(late['n_collectives_last'], 'collective')}; peers wait "
                  f"{fmt_wait(caused)} "
                  f"for it ({wr} of their collective kernel time)"
                  + (f"; only {fmt_wait(exposed)} of those collectives ran outside their compute, so it costs "
                     "no overlap now"
                     if hidden else ""),
            explanation=(f"A collective moves no data until its last rank arrives. Rank {lr} started last at "
                         f"{late['n_collectives_last']} of the matched collectives, so the other ranks' "
                         "communication kernels spent that time spinning: it is waiting, not communication that "
                         "compute could hide, and it delays everything queued behind it on their streams."),
            start_ns=int(sig["first_start_ns"].min()) if len(sig) else None,
            end_ns=int(sig["arrival_ns"].max()) if len(sig) else None,
            evidence={"late_rank": lr, "n_collectives_last": late["n_collectives_last"],
                      "wait_caused_ns": caused, "exposed_ns": exposed,
                      "worst_coll_id": late["worst_coll_id"],
                      "worst_wait_ns": late["worst_wait_ns"],
                      "wait_fraction_by_rank": {str(r): f for r, _, f in waiters}},
        ))
    return findings
