"""Which ranks the dependency graph replays: every rank up to GRAPH_MAX_RANKS, past it the slowest.

The replay is one discrete-event simulation over every replayed rank's activities, so its memory
grows with ranks x activities (about 11 MB a rank of 22,000 GPU activities in the caller). Past
GRAPH_MAX_RANKS ranks the critical path and the findings' savings replay only the GRAPH_MAX_RANKS
ranks with the longest measured mean step (they set the job's step; the others are the ones that
wait for them), and their collectives join those ranks only. The choice is made while the per-rank
results arrive (RankGraphs.add keeps the slowest so far and drops the rest's graphs), so the caller
never holds more than GRAPH_MAX_RANKS + 1 rank graphs; the output says so in a note.
"""

from __future__ import annotations

from collections.abc import Callable

from analyzers.graph.rank_graph import RankGraph
from analyzers.graph.set_graph import build_set_graph
from analyzers.graph.steps import rank_steps

GRAPH_MAX_RANKS = 16


def measured_mean_step_ns(g: RankGraph) -> float:
    """The rank's mean step as measured (its own clock: a step's duration needs no offset)."""
    sg = build_set_graph({g.rank: g}, {}, None, None)
    steps = rank_steps(sg, sg.start, sg.end)
    return float(steps["dur_ns"].mean()) if len(steps) else 0.0


class SlowestRanks:
    """The k ranks with the longest mean step among those offered (ties: the lower rank), whatever the
    order they are offered in."""

    def __init__(self, k: int = GRAPH_MAX_RANKS) -> None:
        self.k = k
        self.kept: dict[int, float] = {}

    def offer(self, rank: int, step_ns: float) -> int | None:
        """Keep rank if it is among the k slowest so far; returns the rank this drops (maybe rank itself)."""
        self.kept[rank] = step_ns
        if len(self.kept) <= self.k:
            return None
        out = min(self.kept, key=lambda r: (self.kept[r], -r))
        del self.kept[out]
        return out



def subset_note(kept: int, total: int) -> str | None:
    """The note on a replay of fewer ranks than the set has (None when it replays them all)."""
    if kept >= total:
        return None
    return (f"critical path and findings' savings: replayed on the {kept} of {total} ranks with the longest "
            "measured mean step (their collectives joined among those ranks only): the replay holds every "
            f"replayed rank's activities, so it takes at most {GRAPH_MAX_RANKS} ranks")


def bounded_rank_graphs(ranks: list[int], graph_of: Callable[[int], RankGraph],
                        step_of: Callable[[RankGraph], float] = measured_mean_step_ns,
                        k: int = GRAPH_MAX_RANKS) -> dict[int, RankGraph]:
    """The graphs of the k slowest ranks (all of them up to k), each fetched or built by graph_of one
    rank at a time, so that at most k + 1 are held."""
    pick = SlowestRanks(k)
    graphs: dict[int, RankGraph] = {}
    for r in ranks:
        g = graph_of(r)
        graphs[r] = g
        if len(ranks) > k and (dropped := pick.offer(r, step_of(g))) is not None:
            del graphs[dropped]
    return {r: graphs[r] for r in sorted(graphs)}
