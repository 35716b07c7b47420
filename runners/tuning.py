"""The tuned variants' schedule search on the ranks: build, check and time candidates together.

Every rank builds the same candidates in the same order; a candidate that fails to build on
any rank (a CUDA-graph capture that is refused, symmetric memory missing) is dropped on all
of them, and so is one whose output differs from the baseline's beyond the dtype bound.
Candidates are timed as the harness times its final measurement: CUDA events around each
iteration, chunks of TIMING_CHUNK iterations alternating between candidates, the median per
rank, and the slowest rank's median. Rank 0 reads and writes the cache; its decision is
broadcast, so all ranks run the same schedule.
"""

from __future__ import annotations

import socket
import statistics
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist

from runners import autotune, symm
from runners.autotune import Schedule
from runners.context import Ctx
from runners.timing import TIMING_CHUNK, slowest_rank, synchronize, time_interleaved
from runners.workload import REL_ERROR_BOUND, Workload, rel_error, rel_ref

Builder = Callable[[Schedule], Callable[[], Any]]


def _agree(ctx: Ctx, ok: bool) -> bool:
    """True on every rank only if ok on every rank."""
    flags: list[Any] = [None] * ctx.world
    dist.all_gather_object(flags, bool(ok), group=ctx.group)
    return all(flags)


def _broadcast(ctx: Ctx, obj: Any) -> Any:
    box = [obj]
    dist.broadcast_object_list(box, src=0, group=ctx.group)
    return box[0]


def build_checked(ctx: Ctx, candidates: Sequence[Schedule], build: Builder, reference: Any,
                  skipped: dict[str, str]) -> dict[str, Callable[[], Any]]:
    """The candidates that build on every rank and match the reference output."""
    fns: dict[str, Callable[[], Any]] = {}
    bound = REL_ERROR_BOUND[ctx.dtype]
    for c in candidates:
        why = ""
        fn = None
        try:
            fn = build(c)
            err = rel_error(fn(), reference)
            if not err <= bound:
                why = f"relative error {err:.3g} above {bound:g}"
        except Exception as exc:  # a candidate that cannot run here is skipped, not fatal
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
        synchronize(ctx)
        if _agree(ctx, not why) and fn is not None:
            fns[c.name] = fn
        else:
            skipped[c.name] = why or "failed on another rank"
            ctx.log(f"tuning: skipped {c.name}: {skipped[c.name]}")
    return fns


def measure(ctx: Ctx, fns: dict[str, Callable[[], Any]]) -> Callable[[Sequence[Schedule], int], dict[str, float]]:
    """The search's timer: interleaved CUDA-event chunks, slowest rank's median per candidate."""

    def run(cands: Sequence[Schedule], reps: int) -> dict[str, float]:
        samples = time_interleaved(ctx, {c.name: fns[c.name] for c in cands}, reps * TIMING_CHUNK)
        mine = {k: statistics.median(v) for k, v in samples.items()}
        every: list[Any] = [None] * ctx.world
        dist.all_gather_object(every, mine, group=ctx.group)
        return {k: max(r[k] for r in every) for k in mine}

    return run


def measure_spread(ctx: Ctx, fns: dict[str, Callable[[], Any]]) -> autotune.SpreadMeasureFn:
    """The cached run's timer: interleaved CUDA-event chunks, the slowest rank's (median, spread) per callable."""

    def run(names: Sequence[str], reps: int) -> dict[str, tuple[float, float]]:
        return slowest_rank(ctx, time_interleaved(ctx, {n: fns[n] for n in names}, reps * TIMING_CHUNK))

    return run


def shape_facts(ctx: Ctx, shape: dict[str, Any]) -> dict[str, Any]:
    """The cache key's fields: the shape plus dtype, world size and GPU model."""
    gpu = torch.cuda.get_device_name(ctx.device) if ctx.cuda else "cpu"
    return {**shape, "dtype": str(ctx.dtype).removeprefix("torch."), "world": ctx.world, "gpu": gpu}


def _release_losers(fns: dict[str, Callable[[], Any]], choice: Schedule) -> None:
    """Drop every other schedule's callable: their CUDA graphs and buffers are freed."""
    for name in list(fns):
        if name != choice.name:
            del fns[name]


def tune(ctx: Ctx, algo: str, shape: dict[str, Any], candidates: Sequence[Schedule], build: Builder,
         reference: Any, code: str, baselines: Callable[[], dict[str, Callable[[], Any]]] = dict,
         ) -> tuple[Schedule, Callable[[], Any], dict[str, Any]]:
    """The schedule for this shape (cached or searched), its callable, and the manifest's record.

    A cached choice is confirmed against the search's runner-up and the baselines (`baselines()`: name ->
    iteration callable, made only then) in this run (autotune.confirm): a close call is timed again."""
    p = ctx.params
    mode = str(p.get("tune", "auto"))
    versions = {"torch": torch.__version__, "cuda": torch.version.cuda}
    fp = autotune.fingerprint(candidates, code, versions)
    key = autotune.shape_key(algo, shape_facts(ctx, shape), socket.gethostname())
    cache = autotune.TuneCache(autotune.cache_dir(), algo)
    say = ctx.log
    hit = _broadcast(ctx, cache.lookup(key, fp, candidates) if ctx.rank == 0 and mode == "auto" else None)
    if hit is not None and hit[1] is not None:
        choice = hit[1]
        say(f"tuning: cached choice {choice.name} ({cache.path})")
        skipped: dict[str, str] = {}
        finalists = _broadcast(ctx, cache.finalists(key, candidates) if ctx.rank == 0 else None)
        fns = build_checked(ctx, list(dict.fromkeys([choice, *finalists])), build, reference, skipped)
        if choice.name in fns:
            company = baselines()
            confirmed = autotune.confirm(choice, [c for c in finalists if c.name in fns],
                                         list(company), measure_spread(ctx, {**fns, **company}), progress=say)
            _release_losers(fns, confirmed.choice)
            return confirmed.choice, fns[confirmed.choice.name], {
                "source": "cache", "cache": str(cache.path), "key": key, "cached_choice": choice.name,
                "choice": confirmed.choice.to_dict(), "confirm": confirmed.record()}
        say(f"tuning: the cached choice no longer runs here ({skipped[choice.name]}): searching again")
    status = "retune" if mode == "retune" else (hit[0] if hit is not None else "miss")
    if status == "stale":
        say("tuning: the cached choice is stale (other candidates, code or versions): searching again")
    skipped = {}
    fns = build_checked(ctx, candidates, build, reference, skipped)
    live = [c for c in candidates if c.name in fns]
    if not live:
        raise RuntimeError("tuning: no candidate schedule runs here: " + "; ".join(f"{k}: {v}"
                                                                                for k, v in skipped.items()))
    result = autotune.search(live, measure(ctx, fns), budget_s=float(p.get("tune_budget_s", 30.0)),
                             progress=say, skipped=skipped)
    if ctx.rank == 0:
        cache.store(key, fp, result)
    _release_losers(fns, result.choice)
    return result.choice, fns[result.choice.name], {"source": "search", "cache_status": status,
                                                     "cache": str(cache.path), "key": key, **result.record()}


def choose(wl: Any, algo: str, shape: dict[str, Any], tuned: Any) -> tuple[Schedule, Callable[[], Any],
                                                                          dict[str, Any]]:
    """A workload's tuned schedule: the parameters' own (tune=off), or the cache's or the search's.

    `tuned` is the algorithm's schedule module (candidates, fixed, CODE_VERSION and a builder
    class taking the workload).
    """
    ctx: Ctx = wl.ctx
    builder = tuned.builder(wl)
    if str(ctx.params.get("tune", "auto")) == "off":
        sched = tuned.fixed(wl)
        return sched, builder.build(sched), {"source": "parameters (tune=off)", "choice": sched.to_dict()}
    reference = rel_ref(wl.baseline_fn("tuned")())

    def baselines() -> dict[str, Callable[[], Any]]:
        refs = {"baseline": wl.baseline_fn("tuned")}
        if "fused-ref" in ctx.spec.variants:
            refs["fused-ref"] = wl.variant_fn("fused-ref")
        return refs

    return tune(ctx, algo, shape, tuned.candidates(wl), builder.build, reference, tuned.CODE_VERSION, baselines)


class TunedWorkload(Workload):
    """A workload whose `tuned` variant takes its schedule from choose(): the search, or the cache.

    Subclasses name their algorithm (TUNED_ALGO) and the module of candidate schedules (TUNED_MODULE),
    and set M, K, N, ctx and the _tuned / _tuning / _tuned_mode / _fallbacks fields in __init__."""

    TUNED_ALGO: str
    TUNED_MODULE: ModuleType

    def prepare(self, variant: str) -> None:
        """tuned: the schedule for this shape (cached or searched), or the parameters' own with tune=off."""
        if variant == "tuned" and self._tuned is None:
            sched, self._tuned, self._tuning = choose(self, self.TUNED_ALGO, {"M": self.M, "K": self.K, "N": self.N},
                                                      self.TUNED_MODULE)
            self._tuned_mode = sched.name
            if not symm.available(self.ctx):
                self._fallbacks["tuned"] = ("copy-engine and CUDA-graph schedules unavailable here ("
                                            + symm.why_unavailable(self.ctx) + "): NCCL/gloo ones only")

    def tuning(self, variant: str) -> dict[str, Any] | None:
        return self._tuning if variant == "tuned" else None
