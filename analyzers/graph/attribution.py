"""An attribution of the critical path that agrees with the what-if.

The walk (critical.py) names what the step's path ran through: launch gaps, peer wait, blocking-sync
idle, exposed transfer, copies. That is not yet what removing each would buy: where the host is far
ahead of the GPU, the path runs through launch latency that no launch fix removes; where one rank
waits for a peer, removing the wait may only move the path to the rank's own work. So each *cause*
part is charged only as far as removing it shortens the step, read off a replay with it removed:

    charged = clip(step - step with the cause removed, 0, walked)

and the rest of the walked time (``walked - charged``) goes where the path moves: to the parts that
grew on the path of the replay with the cause removed, in proportion to their growth (at most their
growth each). What neither covers is what the removal leaves of the cause itself (launch latency,
the host's first launch, a sync's wake-up): it is counted as ``other``, and the step's ``bounds`` say
so. The parts still add up to the step.

Each removal is a transformation of the replay's inputs (fixes.py), replayed with contention like
any fix; the exposed-transfer removal makes transfers take no time, the peer-wait removal starts
each rank's transfer at its own arrival (the bound of what any fix of a late peer buys; the
`peer-wait` fix, the median rank's arrival, buys part of it). A part under ``MIN_SHARE`` of its step
is kept as walked (no replay is spent on it).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from analyzers.graph.contention import contended_replay
from analyzers.graph.critical import walk
from analyzers.graph.fixes import Fix, ReplayInputs, apply_fixes
from analyzers.graph.replay import Replay
from analyzers.graph.set_graph import SetGraph
from analyzers.graph.steps import rank_steps, step_records

GraphRun = Any  # analyzers.graph.analysis.GraphRun, which imports this module (its sg, order, run())

MIN_SHARE = 0.02  # a cause part below this share of its step is kept as walked
NO_PEER_WAIT = "no-peer-wait"  # the removal of peer wait: each rank's transfer starts at its own arrival
NO_TRANSFER = Fix("comm-speed", 1e12)  # the removal of exposed transfer: transfers take no time
# cause part -> (the removal's name in the bounds, the removal)
CAUSES: dict[str, tuple[str, Fix | str]] = {
    "launch_gaps": ("launch-gaps", Fix("launch-gaps")),
    "sync_idle": ("host-syncs", Fix("host-syncs")),
    "peer_wait": (NO_PEER_WAIT, NO_PEER_WAIT),
    "comm_transfer": ("comm-speed=inf", NO_TRANSFER),
    "copies": ("no-copies", Fix("no-copies")),
}
# what a removal leaves of its cause, in words (the bounds' "left" reason)
LEFT_BY = {
    "launch_gaps": "launch latency, the host's first launch, or host time that removing launch gaps does not "
                   "remove (up to a sync call, a long call)",
    "sync_idle": "host time that removing the syncs alone does not remove (the calls' own time, launch gaps)",
    "peer_wait": "the late rank's path that removing the wait alone does not shorten",
    "comm_transfer": "waits that removing the transfers alone does not shorten",
    "copies": "launches and waits around the copies that removing them alone does not shorten",
}


class _Removed:
    """One cause removed: its graph, replay and per-(rank, step) steps."""

    def __init__(self, sg: SetGraph, inp: ReplayInputs, rp: Replay) -> None:
        self.sg, self.inputs, self.replay = sg, inp, rp
        self.rows: dict[tuple[int, int], dict[str, Any]] = {
            (r["rank"], r["step"]): r for r in step_records(rank_steps(sg, rp.start, rp.end))}


def without_joins(sg: SetGraph) -> SetGraph:
    """The graph with no cross-rank joins: each collective member is an activity of its own rank that runs
    its transfer from its own arrival (what the contention and step caches need is shared, not refitted)."""
    out = replace(sg, coll=np.full(sg.n, -1, dtype=np.int64), coll_ptr=np.zeros(1, dtype=np.int64),
                  coll_nodes=np.zeros(0, dtype=np.int64))
    for key in ("_contention", "_step_groups", "_series_edges", "_residency"):
        if key in sg.__dict__:
            out.__dict__[key] = sg.__dict__[key]
    return out


def _removed(run: GraphRun, part: str) -> _Removed:
    cache: dict[str, _Removed] = run.__dict__.setdefault("_removals", {})
    if part not in cache:
        how = CAUSES[part][1]
        if how == NO_PEER_WAIT:
            adopt_no_peer_wait(run, *no_peer_wait_replay(run))
        else:
            assert isinstance(how, Fix)
            inp, rp = run.run([how])
            cache[part] = _Removed(run.sg, inp, rp)
    return cache[part]


def no_peer_wait_replay(run: GraphRun) -> tuple[ReplayInputs, Replay]:
    """The replay with no cross-rank joins (the peer-wait removal), made anywhere that holds the run."""
    res = contended_replay(without_joins(run.sg), apply_fixes(run.sg, []), run.order)
    return res.inputs, res.replay


def adopt_no_peer_wait(run: GraphRun, inp: ReplayInputs, rp: Replay) -> None:
    """Keep the peer-wait removal's replay (no_peer_wait_replay, made here or in another process)."""
    run.__dict__.setdefault("_removals", {})["peer_wait"] = _Removed(without_joins(run.sg), inp, rp)


def removals_needed(walks: list[tuple[dict[str, Any], dict[str, Any]]]) -> set[str]:
    """The cause parts whose removal charge() replays for these (step row, walk) pairs (its first test)."""
    out = set()
    for row, walked in walks:
        step_ns = int(row["t1"]) - int(row["t0"])
        if step_ns > 0:
            out |= {p for p in CAUSES if int(walked["parts"].get(p, 0)) >= MIN_SHARE * step_ns}
    return out


def prepare_removals(run: GraphRun, parts: list[str]) -> None:
    """Replay these parts' removals now (charge reads them later)."""
    for part in parts:
        _removed(run, part)


def release_removals(run: GraphRun) -> None:
    """Drop the removals' replays (a few arrays per activity each) once every step is charged."""
    run.__dict__.pop("_removals", None)


def _spread(amount: int, growth: dict[str, int]) -> dict[str, int]:
    """amount split over the parts that grew, in proportion to their growth, at most each one's growth."""
    total = sum(growth.values())
    if amount <= 0 or total <= 0:
        return {}
    if total <= amount:
        return dict(growth)
    out, given = {}, 0
    keys = sorted(growth, key=lambda k: -growth[k])
    for k in keys[1:]:
        out[k] = int(amount * growth[k] // total)
        given += out[k]
    out[keys[0]] = amount - given
    return {k: v for k, v in out.items() if v > 0}


def charge(run: GraphRun, rank: int, row: dict[str, Any], walked: dict[str, Any]) -> dict[str, Any]:
    """The walk of (rank, step) with each cause part charged only as far as its removal shortens the step.

    Adds ``walked`` (the parts as walked) and ``bounds`` (per recharged part: its removal, the saving,
    what was charged, where the rest went) to the walk's result; ``parts`` becomes the charged parts."""
    parts = dict(walked["parts"])
    step_ns = int(row["t1"]) - int(row["t0"])
    key = (rank, int(row["step"]))
    bounds: list[dict[str, Any]] = []
    moved_in: dict[str, int] = {}
    for part, (label, _) in CAUSES.items():
        w = int(walked["parts"].get(part, 0))
        if step_ns <= 0 or w < MIN_SHARE * step_ns:
            continue
        rm = _removed(run, part)
        fixed = rm.rows.get(key)
        if fixed is None:  # the step is gone under the removal: nothing to compare
            continue
        saving = step_ns - int(fixed["dur_ns"])
        charged = min(max(saving, 0), w)
        if charged == w:
            continue
        rest = w - charged
        after = walk(rm.sg, rm.replay, rm.inputs, rank, int(fixed["t0"]), int(fixed["t1"]),
                     int(fixed["last_node"]), bool(fixed["ends_at_end"]))["parts"]
        growth = {k: int(after[k]) - int(walked["parts"][k]) for k in after if k != part}
        moved = _spread(rest, {k: v for k, v in growth.items() if v > 0})
        left = rest - sum(moved.values())
        parts[part] -= rest
        for k, v in moved.items():
            moved_in[k] = moved_in.get(k, 0) + v
        if left:
            moved_in["other"] = moved_in.get("other", 0) + left
        bounds.append({"part": part, "walked_ns": w, "removal": label, "saving_ns": int(saving),
                       "charged_ns": int(charged), "moved_ns": moved, "left_ns": int(left),
                       "left_by": LEFT_BY[part] if left else ""})
    for k, v in moved_in.items():
        parts[k] += v
    _cap_moved(run, key, step_ns, parts, walked["parts"], bounds)
    return {**walked, "parts": parts, "walked": dict(walked["parts"]), "bounds": bounds}


def _cap_moved(run: GraphRun, key: tuple[int, int], step_ns: int, parts: dict[str, int], walked: dict[str, int],
               bounds: list[dict[str, Any]]) -> None:
    """A cause part that received time where another's removal moved the path is checked against its own
    removal too: what it would not save goes to other (the path moved to time no fix here removes)."""
    for part, (label, _) in CAUSES.items():
        extra = parts[part] - int(walked.get(part, 0))
        if extra <= 0 or parts[part] < MIN_SHARE * step_ns:
            continue
        fixed = _removed(run, part).rows.get(key)
        if fixed is None:
            continue
        saving = step_ns - int(fixed["dur_ns"])
        over = min(parts[part] - max(saving, 0), extra)
        if over <= 0:
            continue
        parts[part] -= over
        parts["other"] += over
        came = [b["part"] for b in bounds if b["moved_ns"].get(part)]
        bounds.append({"part": part, "walked_ns": int(walked.get(part, 0)) + extra, "removal": label,
                       "saving_ns": int(saving), "charged_ns": parts[part], "moved_ns": {}, "left_ns": int(over),
                       "left_by": f"time the path moves to without {', '.join(came)}, which removing {part} does not "
                                  f"shorten either: {LEFT_BY[part]}"})

