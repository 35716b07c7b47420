"""The decision a dashboard's first screen answers: which run is fastest, why, and what fixing it would buy.

Per run: its best timing (the runner's CUDA-event figure from the manifest where there is one, the traced step
otherwise), both with their source and spread, and a warning where they disagree beyond their spreads; its top
finding with its price (the replay's saving); and the predicted step with every finding's fix applied at once
(analyzers.graph.analysis.whatif). Plain data and text from a report and a manifest: the app draws it, and
every page that names a fastest run reads it here, so no two pages rank runs differently.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .formats import ms as _ms  # a time as every table writes it: 3.208 (ms)
from .formats import pct

RUNNER = "runner's CUDA-event timing"
TRACED = "traced step"


@dataclass(frozen=True)
class Timing:
    """One timing of a run: its median in ns, the range it spreads over, where it comes from and how."""

    median_ns: float
    lo_ns: float
    hi_ns: float
    source: str  # RUNNER | TRACED
    spread: str  # what lo..hi is, in words

    def text(self) -> str:
        return f"{_ms(self.median_ns)} ms ({self.spread} {_ms(self.lo_ns)}–{_ms(self.hi_ns)} ms)"


@dataclass
class RunDecision:
    """One run's line of the decision table."""

    label: str
    runner: Timing | None
    traced: Timing | None
    top_finding: str | None = None  # its title
    top_finding_id: str | None = None
    top_saving_ns: int | None = None
    top_saving_fraction: float | None = None
    fix_all: dict[str, Any] | None = None  # whatif(...) of every finding's fix together
    warnings: list[str] = field(default_factory=list)

    @property
    def best(self) -> Timing | None:
        return self.runner or self.traced


def runner_timing(manifest: dict[str, Any] | None) -> Timing | None:
    """The runner's timed figure (median of the slowest rank) and that rank's interquartile range."""
    if not isinstance(manifest, dict):
        return None
    timings = manifest.get("timings_ms")
    value = timings.get("variant_ms") if isinstance(timings, dict) else None
    if not isinstance(value, (int, float)) or not np.isfinite(value) or value <= 0:
        return None
    samples: list[float] = []
    best_median = -1.0
    for r in manifest.get("ranks") or []:
        t = ((r or {}).get("timings_ms") or {}).get("variant") if isinstance(r, dict) else None
        if isinstance(t, dict) and isinstance(t.get("median"), (int, float)) and t["median"] > best_median:
            best_median = float(t["median"])
            samples = [float(x) for x in t.get("samples") or [] if isinstance(x, (int, float))]
    if len(samples) >= 4:
        lo, hi = np.percentile(samples, [25, 75])
        return Timing(value * 1e6, lo * 1e6, hi * 1e6, RUNNER, f"{len(samples)} timed iterations, interquartile")
    return Timing(value * 1e6, value * 1e6, value * 1e6, RUNNER, "no per-iteration samples recorded:")


def traced_timing(report: Any) -> Timing | None:
    """The traced step: per profiled step the slowest rank's duration, then their median and min–max."""
    per_step: dict[int, float] = {}
    for m in report.ranks:
        it = m.iterations
        if it is None or it.empty:
            continue
        dur = (it["window_end_ns"] - it["window_start_ns"]).to_numpy(dtype=float)
        for s, d in zip(it["step"].to_numpy(), dur, strict=True):
            per_step[int(s)] = max(per_step.get(int(s), 0.0), float(d))
    if not per_step:
        return None
    v = np.asarray(list(per_step.values()))
    return Timing(float(np.median(v)), float(v.min()), float(v.max()), TRACED,
                  f"{len(v)} profiled step{'s' if len(v) != 1 else ''}, min–max")


def disagreement(runner: Timing | None, traced: Timing | None) -> str | None:
    """A warning when the two timings' ranges do not overlap (each point counts as its own range)."""
    if runner is None or traced is None:
        return None
    if runner.hi_ns < traced.lo_ns or traced.hi_ns < runner.lo_ns:
        gap = traced.median_ns - runner.median_ns
        return (f"the runner's timing ({_ms(runner.median_ns)} ms) and the traced step ({_ms(traced.median_ns)} ms) "
                f"differ by {_ms(abs(gap))} ms, beyond both spreads: the profiler's overhead, or steps that do not "
                "run what the timed iterations run; ranked by the runner's")
    return None


def decide(label: str, report: Any, manifest: dict[str, Any] | None, fix_all: dict[str, Any] | None) -> RunDecision:
    """The run's line: timings, top priced finding, and the 'fix all' prediction."""
    runner, traced = runner_timing(manifest), traced_timing(report)
    out = RunDecision(label, runner, traced, fix_all=fix_all)
    warn = disagreement(runner, traced)
    if warn:
        out.warnings.append(warn)
    priced = [f for f in (report.findings or []) if f.saving_ns is not None]
    ranked = sorted(priced, key=lambda f: -f.saving_ns) or list(report.findings or [])
    if ranked:
        top = ranked[0]
        out.top_finding, out.top_finding_id = top.title, top.id
        out.top_saving_ns, out.top_saving_fraction = top.saving_ns, top.saving_fraction
    return out


def ranked(decisions: Sequence[RunDecision]) -> list[RunDecision]:
    """Fastest first by best timing; runs without any timing last, in their order."""
    return sorted(decisions, key=lambda d: (d.best is None, d.best.median_ns if d.best else 0.0))


def price_text(saving_ns: int | None, fraction: float | None) -> str:
    if saving_ns is None:
        return "not priced"
    if saving_ns <= 0:
        return "saves nothing per step"
    return f"saves {_ms(saving_ns)} ms per step ({pct(fraction)})"


def fix_all_text(fix_all: dict[str, Any] | None) -> str:
    """'4.343 → 3.801 ms per step (−12.5 %)', or why there is no prediction."""
    if not fix_all:
        return "no fix to replay"
    if fix_all.get("unavailable"):
        return str(fix_all["unavailable"])
    pred, base = fix_all.get("predicted_step_ns"), fix_all.get("replayed_step_ns")
    if pred is None or base is None:
        return "not predicted"
    frac = fix_all.get("saving_fraction")
    return f"{_ms(base)} → {_ms(pred)} ms per step (−{pct(frac)})" if frac else f"{_ms(pred)} ms per step (no change)"


# What to do first, the evidence after it; the short price before the long finding title, so both fit a laptop
# screen's first view of the grid.
DECISION_HEADER = ["place", "run", "best timing (ms)", "fix all (replayed step)", "top finding's price", "top finding",
                   "source", "runner timing", "traced step"]


def decision_rows(decisions: Sequence[RunDecision]) -> list[list[str]]:
    """The decision table's rows, fastest first, as text."""
    rows = []
    for i, d in enumerate(ranked(decisions), start=1):
        best = d.best
        rows.append([str(i), d.label, _ms(best.median_ns) if best else "n/a", fix_all_text(d.fix_all),
                     price_text(d.top_saving_ns, d.top_saving_fraction) if d.top_finding else "—",
                     d.top_finding or "no finding", best.source if best else "—",
                     d.runner.text() if d.runner else "not recorded", d.traced.text() if d.traced else "no steps"])
    return rows


def headline(decisions: Sequence[RunDecision]) -> str:
    """One sentence: the fastest run, by how much, on which timing."""
    order = [d for d in ranked(decisions) if d.best is not None]
    if not order:
        return "No run has a timing (no runner manifest and no profiled steps)."
    first = order[0]
    if len(order) == 1:
        return f"{first.label}: {_ms(first.best.median_ns)} ms per step ({first.best.source})."
    second = order[1]
    gain = (second.best.median_ns - first.best.median_ns) / second.best.median_ns
    mixed = len({d.best.source for d in order}) > 1
    return (f"Fastest: {first.label}, {_ms(first.best.median_ns)} ms per step ({first.best.source}), "
            f"{pct(gain)} faster than the next, {second.label} ({_ms(second.best.median_ns)} ms, "
            f"{second.best.source})." + (" The runs' timings come from different sources: compare with care."
                                         if mixed else ""))


def peer_wait_text(report: Any) -> str | None:
    """Where the critical path's peer wait comes from, tied to the idle time the Overview's bars show.

    Peer wait on a rank's critical path is time its collectives waited for a later rank; its GPU shows that
    time as idle (or as exposed communication), so the sentence names the late rank, its own cause and the
    waiting rank's idle per step."""
    cp = report.critical_path or {}
    per = cp.get("per_rank") or {}
    if not per:
        return None
    rank, d = max(per.items(), key=lambda kv: kv[1]["parts"].get("peer_wait", 0))
    wait = d["parts"].get("peer_wait", 0)
    step = d.get("mean_step_ns") or 0
    if not step or wait < 0.1 * step:
        return None
    late: dict[int, list[str]] = {}
    steps = cp.get("steps") or []
    for s in [s for s in steps if str(s.get("rank")) == rank] or steps:  # the steps this rank was slowest in
        for p in s.get("peer_wait") or []:
            if str(p["late_rank"]) != rank:  # another rank's step: its late peer may be this rank itself
                late.setdefault(int(p["late_rank"]), []).append(str(p["cause"]))
    who = "; ".join(f"rank {r} (busy with {max(set(c), key=c.count)})" for r, c in sorted(late.items())) or "a peer"
    idle = [float(m.iterations["idle_ns"].median()) for m in report.ranks
            if str(m.rank) == rank and m.iterations is not None and not m.iterations.empty]
    idle_txt = f"; rank {rank}'s GPU idle per step is {_ms(idle[0])} ms" if idle else ""
    return (f"Peer wait is {pct(wait / step)} of rank {rank}'s step ({_ms(wait)} of {_ms(step)} ms): its "
            f"collectives wait for {who}. That wait is the idle time and exposed communication the bars show"
            f"{idle_txt}; fix the late rank's cause and the wait goes with it.")


def sync_idle_text(report: Any) -> str | None:
    """Where the critical path's blocking-sync idle comes from, tied to the host-sync finding that prices it.

    A host-sync run's critical path is mostly compute; its one cause beside compute is the GPU waiting for a host
    blocked in a sync, the idle time the host-sync finding names. The sentence names that part on the rank where
    it is largest and the finding's price, so the chart's pink band and the headline read as one cause."""
    per = (report.critical_path or {}).get("per_rank") or {}
    if not per:
        return None
    rank, d = max(per.items(), key=lambda kv: kv[1]["parts"].get("sync_idle", 0))
    idle, step = d["parts"].get("sync_idle", 0), d.get("mean_step_ns") or 0
    if not step or idle < 0.1 * step:
        return None
    syncs = [f for f in report.findings or [] if f.id == "host-blocking-sync"]
    text = (f"Blocking-sync idle is {pct(idle / step)} of rank {rank}'s critical path ({_ms(idle)} of {_ms(step)} ms "
            "per step): the GPU waited for a host blocked in a sync.")
    if not syncs:
        return text
    top = max(syncs, key=lambda f: f.saving_ns or 0)
    return (text + f" That is the GPU idle time of the finding \"{top.title}\""
            + (f", and removing those syncs {price_text(top.saving_ns, top.saving_fraction)}." if top.saving_ns
               is not None else "."))


def diff_tone(identical: bool, iterations: Sequence[dict[str, Any]], aggregate: Any) -> str:
    """Whether the diff's verdict says B is 'better', 'worse' or the 'same' in time (a difference within the
    iteration spread is the same), on the figures the verdict judges by (median iteration where both sides have
    steps, else GPU span), so the box's colour follows it."""
    from analyzers.diff.result import SAME_TIME_FRACTION

    if identical:
        return "same"
    ia, ib = iterations
    if ia.get("n") and ib.get("n"):
        ta, tb = ia["iteration_ns_median"], ib["iteration_ns_median"]
        if ia["n"] >= 2 and ib["n"] >= 2 and abs(tb - ta) <= ia["spread_ns"] + ib["spread_ns"]:
            return "same"  # the verdict says: within the iteration spread
    else:
        get = aggregate.set_index("metric")
        ta, tb = get.at["span_ns", "a"], get.at["span_ns", "b"]
    slow = max(ta, tb)
    if not slow or slow <= 0 or abs(tb - ta) / slow < SAME_TIME_FRACTION:
        return "same"
    return "better" if tb < ta else "worse"


def best_comparison(a: RunDecision, b: RunDecision) -> str | None:
    """The two runs by their best timing (as the Overview ranks them), in words; None without timings."""
    if a.best is None or b.best is None:
        return None
    fast, slow = (a, b) if a.best.median_ns <= b.best.median_ns else (b, a)
    gain = (slow.best.median_ns - fast.best.median_ns) / slow.best.median_ns
    return (f"By best timing (as the Overview ranks runs): {a.label} {_ms(a.best.median_ns)} ms ({a.best.source}), "
            f"{b.label} {_ms(b.best.median_ns)} ms ({b.best.source}): {fast.label} is {pct(gain)} faster.")
