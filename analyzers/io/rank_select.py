"""A subset of a run's ranks (`--ranks 0-7,512,1023`): parse the selection, skip the other files
cheaply, and say which ranks a set lacks.

A file's rank is what the reader decides (distributedInfo first, then the file name), so a file
is skipped before parsing only when its opening bytes carry a distributedInfo rank outside the
selection (Kineto writes that block before the events); any other file is parsed and its traces
kept or dropped by the rank the reader gave them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

HEAD_BYTES = 1 << 16  # how much of a file is searched for its distributedInfo rank
MAX_SELECTED = 1 << 20  # a range wider than this is a typo, not a job
_DIST_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)')


def parse_ranks(spec: str) -> frozenset[int]:
    """'0-7,512,1023' -> {0..7, 512, 1023}; ValueError naming the part that is not a rank or range."""
    out: set[int] = set()
    for part in (p.strip() for p in spec.split(",")):
        m = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if not m:
            raise ValueError(f"{part!r} is not a rank or a range of ranks (e.g. 0-7,512,1023)")
        lo, hi = int(m[1]), int(m[2] or m[1])
        if hi < lo:
            raise ValueError(f"{part!r}: the range ends before it starts")
        if hi - lo >= MAX_SELECTED:
            raise ValueError(f"{part!r}: more than {MAX_SELECTED} ranks")
        out.update(range(lo, hi + 1))
    return frozenset(out)


def format_ranks(ranks: Iterable[int], max_parts: int = 24) -> str:
    """Sorted ranks as ranges: [0, 1, 2, 3, 512] -> '0-3, 512' (past max_parts ranges, the count of the rest)."""
    rs = sorted(set(ranks))
    parts: list[str] = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        parts.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    if len(parts) > max_parts:
        rest = len(parts) - max_parts
        return ", ".join(parts[:max_parts]) + f" and {rest} more range{'s' if rest > 1 else ''}"
    return ", ".join(parts)


def head_rank(path: Path) -> int | None:
    """The distributedInfo rank in a plain (not gzipped) JSON file's opening bytes, else None."""
    try:
        with path.open("rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError:
        return None  # the reader reports it
    if head[:2] == b"\x1f\x8b":
        return None
    m = _DIST_RANK.search(head)
    return int(m[1]) if m else None


def skip_file(path: Path, only: frozenset[int] | None) -> bool:
    """True when the file's opening bytes say it holds a rank outside the selection."""
    if only is None:
        return False
    r = head_rank(path)
    return r is not None and r not in only


def selection_notes(only: frozenset[int] | None, found: Iterable[int], world_size: int | None) -> list[str]:
    """What a selection left out: asked-for ranks no file holds, and (world size known) the rest."""
    if only is None:
        return []
    have = set(found)
    notes = []
    absent = sorted(only - have)
    if absent:
        notes.append(f"--ranks: no trace holds rank {format_ranks(absent)}")
    if world_size is not None:
        notes.append(f"--ranks: {len(have)} of {world_size} ranks analyzed ({format_ranks(have)}); cross-rank "
                     "figures cover only these ranks")
    else:
        notes.append(f"--ranks: {len(have)} ranks analyzed ({format_ranks(have)}); cross-rank figures cover "
                     "only these ranks")
    return notes


def missing_ranks_note(found: Iterable[int], world_size: int | None) -> str | None:
    """'ranks 8-1023 of 1024 not given' when the set lacks ranks of its world size."""
    if world_size is None:
        return None
    have = set(found)
    missing = [r for r in range(world_size) if r not in have]
    if not missing:
        return None
    return (f"{len(have)} of {world_size} ranks given; missing rank {format_ranks(missing)}: cross-rank figures "
            "cover only the ranks given")
