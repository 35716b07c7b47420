"""Cross-rank analysis: collective matching, clock alignment, peer wait, order mismatches.

This package's public face; callers import from `analyzers.crossrank`, the modules below hold one job each.
"""

from analyzers.crossrank.analysis import (
    ClockAlignment,
    CrossRankParams,
    CrossRankReport,
    analyze_cross_rank,
    cross_rank_findings,
    normalized_name,
)

__all__ = ["ClockAlignment", "CrossRankParams", "CrossRankReport", "analyze_cross_rank", "cross_rank_findings",
           "normalized_name"]
