"""Names the command line shows before anything is loaded: light to import (no pandas), so that
`--help` and a report-cache hit start fast. The modules that use them import them from here."""

from __future__ import annotations

# A profiler step range: torch.profiler's "ProfilerStep#N" (group 1 = the step number).
DEFAULT_STEP_PATTERN = r"^ProfilerStep\s*#\s*(\d+)$"

# How kernels are named when two runs are compared (analyzers.timeline.kernel_names).
KERNEL_NAME_MODES = ("normalized", "coarse", "raw")

# "No time": the value a time column holds where the time is unknown (a GPU activity whose launching
# call is not in the trace, a sync after which nothing was launched). The smallest int64, outside every
# valid time (readers refuse |t| past 4e18 ns, analyzers/io/input_limits.py), so that a trace whose
# clock reads negative keeps all its times: -1 was a valid time there.
NO_TIME = -(1 << 63)
