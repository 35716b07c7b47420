"""A finding: one diagnosed cause of lost overlap, with its evidence and the known fix.

Detectors (analyzers/diagnose/findings.py, analyzers/crossrank.py, analyzers/diagnose/syncs.py) return these;
the CLI, the app and diff render them. Plain data, JSON-serializable through to_dict().
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Severity(StrEnum):
    info = "info"
    warning = "warning"
    critical = "critical"


SEVERITY_ORDER = {Severity.info: 0, Severity.warning: 1, Severity.critical: 2}

# The catalogue (DESIGN.md, Findings): id -> (what it detects, known fix).
CATALOGUE: dict[str, tuple[str, str]] = {
    "host-blocking-sync": (
        "the host blocks on the GPU inside the overlapped region; the GPU drains",
        "wait on an event (cudaStreamWaitEvent / stream.wait_event) instead of synchronizing the host",
    ),
    "serialized-streams": (
        "work on several streams never runs concurrently because each stream waits for the previous one",
        "issue all fork waits before the loop; join after it",
    ),
    "cross-rank-order-mismatch": (
        "ranks start independent kernels on different streams in different orders; "
        "barriers/collectives then wait for the slowest",
        "enforce one order: a small delay kernel on the other stream, or an explicit inter-stream dependency",
    ),
    "front-loaded-collectives": (
        "most of an iteration's communication runs before its first compute kernel",
        "issue each collective just before its consumer; wait right before use",
    ),
    "copy-kernels-block-overlap": (
        "pack/unpack copy kernels on the compute stream next to collectives",
        "preallocate buckets, use views / interleaved copies",
    ),
    "launch-bound-gaps": (
        "GPU idle gaps where the next kernel was launched after the previous one ended",
        "larger chunks, CUDA graphs, fewer launches",
    ),
    "comm-slowed-by-overlap": (
        "communication kernels run markedly slower while overlapped than alone (SM / memory contention)",
        "copy-engine or fewer-CTA communication, SM carve-out",
    ),
    "comm-starved-by-compute": (
        "communication kernels ready long before they started, dispatched only at the tail of a compute "
        "kernel that took every SM (stream priority does not preempt)",
        "make the comm kernel dispatch first (the compute waits on a short gate kernel of the comm stream, "
        "then a few µs), move the transfer to the copy engine, or leave SMs free (SM carve-out) where the "
        "GEMM honours it",
    ),
    "late-peer": (
        "a rank's collectives mostly wait for a late peer (straggler)",
        "fix the straggler's cause",
    ),
}


@dataclass
class Finding:
    id: str  # a key of CATALOGUE
    severity: Severity
    ranks: list[int]
    title: str  # one line, specific: "rank 1: 12 host syncs blocked 3.1 ms inside the overlapped region"
    explanation: str  # why this loses overlap, in this trace's terms
    fix: str = ""  # defaults to the catalogue's known fix
    start_ns: int | None = None  # time range on the (aligned) timeline, for the app to jump to
    end_ns: int | None = None
    evidence: dict[str, Any] = field(default_factory=dict)  # the figures behind it

    def __post_init__(self) -> None:
        if self.id not in CATALOGUE:
            raise ValueError(f"unknown finding id {self.id!r}")
        self.severity = Severity(self.severity)
        if not self.fix:
            self.fix = CATALOGUE[self.id][1]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["severity"] = str(self.severity)
        return d


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Most severe first, then by id and first rank, so output is stable."""
    return sorted(findings, key=lambda f: (-SEVERITY_ORDER[f.severity], f.id, f.ranks[:1], f.start_ns or 0))
