"""The analysis of one trace set as data: what `analyze` prints, what the app and diff read."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .metrics import AnalysisOptions, RankMetrics, rank_metrics
from .model import TraceSet


@dataclass
class AnalysisReport:
    label: str
    fmt: str
    world_size: int | None
    sources: list[str]
    ranks: list[RankMetrics]
    notes: list[str] = field(default_factory=list)
    clock_offsets_ns: dict[int, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # sections added by later analyses

    def rank(self, r: int) -> RankMetrics:
        for m in self.ranks:
            if m.rank == r:
                return m
        raise KeyError(r)

    def ranks_below(self, threshold: float) -> list[RankMetrics]:
        """Ranks whose overlap ratio is defined and below threshold (the CI gate)."""
        return [m for m in self.ranks if m.overlap_ratio is not None and m.overlap_ratio < threshold]

    def to_dict(self) -> dict[str, Any]:
        return _clean({
            "label": self.label,
            "format": self.fmt,
            "world_size": self.world_size,
            "sources": self.sources,
            "clock_offsets_ns": {str(k): v for k, v in self.clock_offsets_ns.items()},
            "notes": self.notes,
            "ranks": [m.to_dict() for m in self.ranks],
            **self.extra,
        })


def _clean(obj: Any) -> Any:
    """JSON-safe: NaN/inf -> None, numpy scalars -> Python, tuples -> lists."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        try:
            obj = obj.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def analyze(traces: TraceSet, options: AnalysisOptions | None = None,
            progress: Callable[[int, int], None] | None = None) -> AnalysisReport:
    """Metrics for every rank of a trace set."""
    options = options or AnalysisOptions()
    out = []
    ids = traces.rank_ids()
    for i, r in enumerate(ids):
        out.append(rank_metrics(traces.ranks[r], options))
        if progress:
            progress(i + 1, len(ids))
    return AnalysisReport(
        label=traces.label,
        fmt=traces.fmt,
        world_size=traces.world_size,
        sources=traces.sources,
        ranks=out,
        notes=list(traces.notes),
        clock_offsets_ns=dict(traces.clock_offsets_ns),
    )
