"""Comparing two analyzed trace sets (schedule variants), and many runs against a baseline.

This package's public face; callers import from `analyzers.diff`, the modules below hold one job each.
"""

from analyzers.diff.compare import compare_many, diff_reports
from analyzers.diff.rank_metrics import iteration_stats, pair_ranks
from analyzers.diff.result import IDENTICAL, SAME_OVERLAP_POINTS, SAME_TIME_FRACTION, TraceDiff
from analyzers.diff.sections import section_total
from analyzers.diff.timelines import aligned_timelines

__all__ = ["IDENTICAL", "SAME_OVERLAP_POINTS", "SAME_TIME_FRACTION", "TraceDiff", "aligned_timelines",
           "compare_many", "diff_reports", "iteration_stats", "pair_ranks", "section_total"]
