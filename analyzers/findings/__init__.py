"""Findings: why overlap was lost, one module per finding, registered in registry.py.

This package's public face; callers import from `analyzers.findings`.
"""

from analyzers.findings.detect import (
    cross_rank_findings,
    detect_findings,
    detect_rank,
    findings_present,
    trace_set_syncs,
)
from analyzers.findings.finding import CATALOGUE, CatalogueEntry, Finding, Severity, sort_findings
from analyzers.findings.registry import CROSS_RANK_FINDINGS, FINDINGS, RANK_FINDINGS, FindingParams

__all__ = ["CATALOGUE", "CROSS_RANK_FINDINGS", "FINDINGS", "RANK_FINDINGS", "CatalogueEntry", "Finding",
           "FindingParams", "Severity", "cross_rank_findings", "detect_findings", "detect_rank", "findings_present",
           "sort_findings", "trace_set_syncs"]
