"""Comparing two analyzed trace sets (schedule variants), and many runs against a baseline.

This package's public face; callers import from `analyzers.diff`, the modules below hold one job each.
"""

from analyzers.diff.compare import (
    IDENTICAL,
    SAME_OVERLAP_POINTS,
    SAME_TIME_FRACTION,
    TraceDiff,
    aligned_timelines,
    compare_many,
    diff_reports,
    iteration_stats,
    pair_ranks,
    section_total,
)

__all__ = ["IDENTICAL", "SAME_OVERLAP_POINTS", "SAME_TIME_FRACTION", "TraceDiff", "aligned_timelines",
           "compare_many", "diff_reports", "iteration_stats", "pair_ranks", "section_total"]
