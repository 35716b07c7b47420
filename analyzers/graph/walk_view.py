"""The critical path walk's inputs as Python lists.

The walk (critical.py) reads one element at a time of a dozen arrays, several times per activity on
the path, hundreds of thousands of times a set: a numpy scalar read costs ~100 ns and makes a numpy
scalar, a list's ~30 ns and gives an int. These views hold the arrays the walk reads as lists (made
once per replay walked, O(activities)) and pass every other attribute through to the graph, replay
and inputs they view, so the walk runs unchanged on them and gives the same figures.
"""

from __future__ import annotations

from typing import Any

import numpy as np

GRAPH_FIELDS = ("rank_of", "cat", "coll", "prev", "seg", "seg_opened_by", "sync_awaited", "sync_seg")
REPLAY_FIELDS = ("start", "end", "why", "arrival", "late", "seg_time", "sync_call", "sync_resume", "sync_gpu_bound")
INPUT_FIELDS = ("dep", "dep2", "gate", "off", "sync_blocks")


class ListView:
    """src with the named array attributes as lists; everything else read from src."""

    def __init__(self, src: Any, fields: tuple[str, ...]) -> None:
        self._src = src
        for f in fields:
            v = getattr(src, f)
            setattr(self, f, v.tolist() if isinstance(v, np.ndarray) else v)

    def __getattr__(self, name: str) -> Any:  # only for what __init__ did not set
        return getattr(self.__dict__["_src"], name)


def walk_views(sg: Any, rp: Any, inp: Any) -> tuple[ListView, ListView, ListView]:
    """The graph, replay and inputs as the walk reads them (module docstring)."""
    return ListView(sg, GRAPH_FIELDS), ListView(rp, REPLAY_FIELDS), ListView(inp, INPUT_FIELDS)
