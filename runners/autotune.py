"""Choosing a tuned variant's schedule: candidates, a timed search, and a per-host cache of the choice.

Pure Python (no torch): the search is given a `measure` callable that times a list of
candidates and returns each one's median in ms, so the logic is tested with a fake timer and
runs unchanged on GPUs (runners/tuning.py measures there with CUDA events, interleaved in
chunks like the harness's final measurement, the slowest rank's median).

Why a search: a schedule that wins at one shape loses at another. On two shapes that the
hand-tuned GEMM+reduce-scatter had not been tuned on, it ran 8-19 % slower than the baseline;
the analysis of those traces found `launch-bound-gaps` over 69 % of one rank's span (many
small launches: chunks, copies, barriers) and the other rank's barrier kernels waiting 99.8 %
of their time. So the candidates span the number of chunks (fewer launches), CUDA-graph
capture (no launch gaps), the transport, the comm stream's priority and the barrier placement,
and always include a schedule that is the baseline itself (chunks=1, no overlap): picked by
measured time, the tuned variant can then lose to the baseline only by the timing noise.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from analyzers.io.atomic_write import atomic_path

CACHE_VERSION = 1
FINALISTS = 3  # the last round times the 3 best schedules and the best of the 3 best families again
ENV_CACHE_DIR = "OVERLAPSCOPE_CACHE_DIR"  # the same override as the analyzer's caches

# the cached run's confirmation: chunks of the check (choice, runner-up, baselines), then of the re-timing
CONFIRM_REPS = (4, 10)

# the schedules that are a reference itself (the baseline's, PyTorch's fused op): every search times them to its
# last round, so the choice loses to either only by the noise
REFERENCE_TRANSPORTS = ("serial", "fused")

ProgressFn = Callable[[str], None]
MeasureFn = Callable[[Sequence["Schedule"], int], dict[str, float]]
# times named callables for a number of chunks: name -> (median ms, spread ms = half the range of chunk medians)
SpreadMeasureFn = Callable[[Sequence[str], int], dict[str, tuple[float, float]]]


@dataclass(frozen=True)
class Schedule:
    """One candidate schedule of a tuned variant.

    transport: "serial" (the baseline's collective after the whole GEMM: no overlap), "fused"
    (PyTorch's own fused symmetric-memory op, the `fused-ref` variant's call), "ce"
    (copy engine through symmetric memory) or "nccl" (NCCL collectives / point-to-point).
    chunks: pipeline chunks per rank's block. priority: CUDA priority of the comm streams.
    barrier: where the schedule waits for its peers (algorithm-specific names). graph: the
    iteration is captured once as CUDA graphs and replayed. lanes: copy streams each transfer is
    split over (copy engines working in parallel).
    """

    transport: str
    chunks: int = 1
    priority: int = -1
    barrier: str = "-"
    graph: bool = False
    lanes: int = 1

    @property
    def name(self) -> str:
        if self.transport in REFERENCE_TRANSPORTS:
            return self.transport + ("+graph" if self.graph else "")
        return (f"{self.transport}{'' if self.lanes == 1 else f'*{self.lanes}'} x{self.chunks} "
                f"prio{self.priority} {self.barrier}"
                + (" +graph" if self.graph else ""))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Schedule:
        return cls(transport=str(d["transport"]), chunks=int(d["chunks"]), priority=int(d["priority"]),
                   barrier=str(d["barrier"]), graph=bool(d["graph"]), lanes=int(d.get("lanes", 1)))


@dataclass
class SearchResult:
    """The chosen schedule, every candidate's median (ms, per round) and how long the search took."""

    choice: Schedule
    rounds: list[dict[str, float]]
    seconds: float
    skipped: dict[str, str]

    def record(self) -> dict[str, Any]:
        return {"choice": self.choice.to_dict(), "rounds_ms": [{k: round(v, 5) for k, v in r.items()}
                                                              for r in self.rounds],
                "search_s": round(self.seconds, 2), "skipped": self.skipped}


def search(candidates: Sequence[Schedule], measure: MeasureFn, *, keep: int = 4,
           reps: tuple[int, int, int] = (3, 10, 20), budget_s: float = 30.0,
           clock: Callable[[], float] = time.monotonic, progress: ProgressFn | None = None,
           skipped: dict[str, str] | None = None) -> SearchResult:
    """Three rounds: every candidate for reps[0] timing chunks, then the best `keep`, the best of every
    family (transport and barrier: structurally different schedules, whose round-1 order a few
    noisy chunks can swap) and every reference candidate (REFERENCE_TRANSPORTS: the baseline's schedule,
    PyTorch's fused op) again for reps[1] chunks, then the best FINALISTS of that round, the best of each
    of its FINALISTS best families and the best of each reference transport for reps[2] chunks; the
    lowest median of the last round wins.
    Schedules of different families often lie within 2-4 % of each other, as close as the spread of
    a 50-iteration median, and their order moves with the GPU's clocks (on 2 x H200 at 8192 x 4096 x
    32768 fp16 three output-push schedules led round 2 while the operand exchange was 4 % faster
    over 150 iterations among GEMM-heavy schedules); the last round's longer measurement of a few,
    of different families, decides. A round is skipped when the
    rounds before it used up its share of the time budget (half before round 2, three quarters
    before round 3).
    """
    if not candidates:
        raise ValueError("no candidate schedule to search")
    t0 = clock()
    say = progress or (lambda _msg: None)
    say(f"tuning: round 1, {len(candidates)} candidate schedules")
    first = measure(list(candidates), reps[0])
    rounds = [first]
    ranked = sorted(candidates, key=lambda c: first[c.name])
    if len(candidates) > 1 and clock() - t0 < budget_s / 2:
        family_best: dict[tuple[str, str], Schedule] = {}
        for c in ranked:
            family_best.setdefault((c.transport, c.barrier), c)
        finalists = list(dict.fromkeys([*ranked[:keep], *family_best.values(),
                                        *[c for c in candidates if c.transport in REFERENCE_TRANSPORTS]]))
        say(f"tuning: round 2, {len(finalists)} finalists: " + ", ".join(c.name for c in finalists))
        rounds.append(measure(finalists, reps[1]))
        ranked = sorted(finalists, key=lambda c: rounds[-1][c.name])
        references = [next(c for c in ranked if c.transport == t) for t in REFERENCE_TRANSPORTS
                      if any(c.transport == t for c in ranked)]
        family_lead: dict[tuple[str, str], Schedule] = {}
        for c in ranked:
            family_lead.setdefault((c.transport, c.barrier), c)
        last = list(dict.fromkeys([*ranked[:FINALISTS], *list(family_lead.values())[:FINALISTS], *references]))
        if len(last) > 1 and clock() - t0 < budget_s * 3 / 4:
            say(f"tuning: round 3, {len(last)} finalists: " + ", ".join(c.name for c in last))
            rounds.append(measure(last, reps[2]))
            ranked = sorted(last, key=lambda c: rounds[-1][c.name])
        elif len(last) > 1:
            say(f"tuning: round 3 skipped (rounds 1-2 took {clock() - t0:.1f} s of the {budget_s:.0f} s budget)")
    elif len(candidates) > 1:
        say(f"tuning: round 2 skipped (round 1 took {clock() - t0:.1f} s of the {budget_s:.0f} s budget)")
    choice = ranked[0]
    say(f"tuning: chose {choice.name} ({rounds[-1][choice.name]:.3f} ms) in {clock() - t0:.1f} s")
    return SearchResult(choice=choice, rounds=rounds, seconds=clock() - t0, skipped=dict(skipped or {}))


# --------------------------------------------------------------------------- the cached run's check


def within_spread(choice: str, timed: dict[str, tuple[float, float]]) -> list[str]:
    """The rivals whose median is not clear of the choice's: their ± spreads overlap (or the rival is faster)."""
    median, spread = timed[choice]
    return [k for k, (m, s) in timed.items() if k != choice and m - median <= spread + s]


@dataclass
class Confirmation:
    """A cached choice checked in this run: kept, or replaced by the fastest finalist timed again."""

    choice: Schedule
    close_to: list[str]
    rounds: list[dict[str, tuple[float, float]]]

    def record(self) -> dict[str, Any]:
        return {"close_to": self.close_to, "retimed": len(self.rounds) > 1,
                "rounds_ms": [{k: [round(m, 5), round(s, 5)] for k, (m, s) in r.items()} for r in self.rounds]}


def confirm(cached: Schedule, finalists: Sequence[Schedule], baselines: Sequence[str], measure: SpreadMeasureFn,
            *, reps: tuple[int, int] = CONFIRM_REPS, progress: ProgressFn | None = None) -> Confirmation:
    """The cached choice, unless this run's timing makes it a close call.

    A choice made in another process can lose by the noise it won by: on 4 x H200 the cached
    ag-gemm 24576 x 4096 x 12288 fp16 schedule ran 3.815 ± 0.179 ms beside fused-ref's 3.734 ± 0.119.
    So the cached run times the choice, the search's runner-up (`finalists` are its last round,
    fastest first) and the baselines interleaved for reps[0] chunks; when a rival's median lies
    within the two spreads of the choice's, every finalist and the baselines are timed again,
    interleaved, for reps[1] chunks, and the finalist with the lowest median is chosen (the
    baselines are company: measured under the same conditions, never chosen). The same rule at
    every shape and world size.
    """
    say = progress or (lambda _msg: None)
    rivals = [c for c in finalists if c != cached]
    check = measure(list(dict.fromkeys([cached.name, *[c.name for c in rivals[:1]], *baselines])), reps[0])
    close = within_spread(cached.name, check)
    if not close:
        return Confirmation(cached, [], [check])
    say(f"tuning: cached choice {cached.name} within the spread of {', '.join(close)}: timing "
        f"{len(rivals) + 1} finalists and the baselines again")
    pool = [cached, *rivals]
    again = measure(list(dict.fromkeys([*[c.name for c in pool], *baselines])), reps[1])
    best = min(pool, key=lambda c: again[c.name][0])
    say(f"tuning: re-timed choice {best.name} ({again[best.name][0]:.3f} ms)")
    return Confirmation(best, close, [check, again])


# --------------------------------------------------------------------------- cache


def cache_dir() -> Path:
    """$OVERLAPSCOPE_CACHE_DIR/tuning, else the user cache folder's overlapscope/tuning."""
    override = os.environ.get(ENV_CACHE_DIR)
    if override:
        return Path(override) / "tuning"
    try:
        from platformdirs import user_cache_dir  # the analyzer's choice of folder, where installed
    except ImportError:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "overlapscope"
    else:
        base = Path(user_cache_dir("overlapscope"))
    return base / "tuning"


def shape_key(algo: str, shape: dict[str, Any], host: str) -> str:
    """What a choice is valid for: algorithm, shape, dtype, world size, GPU model, host."""
    fields = ",".join(f"{k}={shape[k]}" for k in sorted(shape))
    return f"{algo}|{fields}|host={host}"


def fingerprint(candidates: Sequence[Schedule], code: str, versions: dict[str, Any]) -> str:
    """Changes when the candidate space, the schedule code or the software stack does: a stale choice."""
    h = hashlib.sha256()
    h.update(json.dumps([c.name for c in candidates]).encode())
    h.update(code.encode())
    h.update(json.dumps(versions, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


class TuneCache:
    """One JSON file per algorithm under the cache folder: key -> {choice, fingerprint, ...}."""

    def __init__(self, folder: Path, algo: str) -> None:
        self.path = Path(folder) / f"{algo}.json"

    def _load(self) -> dict[str, Any]:
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(doc, dict) or doc.get("version") != CACHE_VERSION:
            return {}
        entries = doc.get("entries")
        return entries if isinstance(entries, dict) else {}

    def lookup(self, key: str, fp: str, candidates: Sequence[Schedule]) -> tuple[str, Schedule | None]:
        """("hit", schedule), ("stale", None) when the entry was made by other code or software, or
        ("miss", None)."""
        entry = self._load().get(key)
        if not isinstance(entry, dict):
            return "miss", None
        try:
            choice = Schedule.from_dict(entry["choice"])
        except (KeyError, TypeError, ValueError):
            return "stale", None
        if entry.get("fingerprint") != fp or choice not in candidates:
            return "stale", None
        return "hit", choice

    def finalists(self, key: str, candidates: Sequence[Schedule]) -> list[Schedule]:
        """The last search round's schedules for this key that are still candidates, fastest first."""
        entry = self._load().get(key)
        rounds = entry.get("rounds_ms") if isinstance(entry, dict) else None
        last = rounds[-1] if isinstance(rounds, list) and rounds and isinstance(rounds[-1], dict) else {}
        by_name = {c.name: c for c in candidates}
        timed = [(float(v), by_name[k]) for k, v in last.items() if k in by_name and isinstance(v, int | float)]
        return [c for _, c in sorted(timed, key=lambda t: t[0])]

    def store(self, key: str, fp: str, result: SearchResult) -> None:
        """Write atomically (a rename), so a reader never sees half a file."""
        entries = self._load()
        entries[key] = {"fingerprint": fp, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **result.record()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.path) as tmp:
            tmp.write_text(json.dumps({"version": CACHE_VERSION, "entries": entries}, indent=1))

