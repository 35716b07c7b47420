"""Names the command line shows before anything is loaded: light to import (no pandas), so that
`--help` and a report-cache hit start fast. The modules that use them import them from here."""

from __future__ import annotations

# A profiler step range: torch.profiler's "ProfilerStep#N" (group 1 = the step number).
DEFAULT_STEP_PATTERN = r"^ProfilerStep\s*#\s*(\d+)$"

# How kernels are named when two runs are compared (analyzers.timeline.kernel_names).
KERNEL_NAME_MODES = ("normalized", "coarse", "raw")
