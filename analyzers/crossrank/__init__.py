"""Cross-rank analysis: collective matching, clock alignment, peer wait, order mismatches.

This package's public face; callers import from `analyzers.crossrank`, the modules below hold one job each.
"""

from analyzers.crossrank.analysis import analyze_cross_rank
from analyzers.crossrank.frames import normalized_name
from analyzers.crossrank.report import ClockAlignment, CrossRankParams, CrossRankReport
from analyzers.crossrank.steps import RankSteps, rank_steps

__all__ = ["ClockAlignment", "CrossRankParams", "CrossRankReport", "RankSteps", "analyze_cross_rank",
           "normalized_name", "rank_steps"]
