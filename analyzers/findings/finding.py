"""A finding: one diagnosed cause of lost overlap, with its evidence and the known fix.

Detectors (one module per finding in analyzers/findings/) return these;
the CLI, the app and diff render them. Plain data, JSON-serializable through to_dict().
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Severity(StrEnum):
    info = "info"
    warning = "warning"
    critical = "critical"


SEVERITY_ORDER = {Severity.info: 0, Severity.warning: 1, Severity.critical: 2}


@dataclass(frozen=True)
class CatalogueEntry:
    """One finding's catalogue entry (DESIGN.md, Findings); each finding module declares its own ENTRY."""

    id: str
    detects: str  # what it detects
    fix: str  # the known fix (a Finding's default fix)
    summary: str  # what it detects, in a few words (README's catalogue table)
    summary_fix: str  # the fix, in a few words (README's catalogue table)
    look_alikes: str  # the healthy patterns it must stay silent on (each has a test)


# id -> entry, in catalogue order. Filled in one place, analyzers/findings/registry.py, which the
# package's __init__ imports: importing anything from analyzers.findings fills it first.
CATALOGUE: dict[str, CatalogueEntry] = {}


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
    # the step-time reduction its fix would bring (analyzers.graph: the replay with the fix, median over
    # steps), its share of the replayed step, and the fix replayed; None when not priced
    saving_ns: int | None = None
    saving_fraction: float | None = None
    saving_fix: str | None = None

    def __post_init__(self) -> None:
        if self.id not in CATALOGUE:
            raise ValueError(f"unknown finding id {self.id!r}")
        self.severity = Severity(self.severity)
        if not self.fix:
            self.fix = CATALOGUE[self.id].fix

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["severity"] = str(self.severity)
        return d


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Largest saving first (priced findings before unpriced ones), then most severe, by id and first
    rank, so output is stable."""
    return sorted(findings, key=lambda f: (f.saving_ns is None, -(f.saving_ns or 0), -SEVERITY_ORDER[f.severity],
                                           f.id, f.ranks[:1], f.start_ns or 0))


MAX_FINDINGS_PER_ID = 32  # findings of one id a report's document lists (the first in sort_findings' order)


def listed_findings(findings: list[Finding] | None) -> list[Finding]:
    """The findings the document lists: every id, at most MAX_FINDINGS_PER_ID of each (the per-rank findings of a
    thousand ranks would be MBs); every one is a row of `analyze --tables` (findings.parquet)."""
    seen: Counter[str] = Counter()
    out = []
    for f in findings or []:
        seen[f.id] += 1
        if seen[f.id] <= MAX_FINDINGS_PER_ID:
            out.append(f)
    return out


def listed_findings_note(findings: list[Finding] | None) -> list[str]:
    """The note saying how many findings the document leaves out, if any."""
    left = len(findings or []) - len(listed_findings(findings))
    return [f"findings: {len(findings or [])} found; the document lists at most {MAX_FINDINGS_PER_ID} of each kind, "
            f"{left} left out (every finding: analyze --tables DIR, findings.parquet)"] if left else []
