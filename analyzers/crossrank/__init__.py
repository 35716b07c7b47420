"""Cross-rank analysis: collective matching, clock alignment, peer wait, order mismatches.

This package's public face; callers import from `analyzers.crossrank`, the modules below hold one job each.
"""

from analyzers.crossrank.analysis import analyze_cross_rank
from analyzers.crossrank.frames import normalized_name
from analyzers.crossrank.report import ClockAlignment, CrossRankParams, CrossRankReport

__all__ = ["ClockAlignment", "CrossRankParams", "CrossRankReport", "analyze_cross_rank",
           "normalized_name"]
