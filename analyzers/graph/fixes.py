"""What-if fixes: each one a transformation of the graph's inputs before a replay.

A fix changes durations, host offsets, edges or the join rule, never a replayed time directly.
The findings each name the fix that removes their cause (FIX_OF_FINDING); docs/whatif.md
describes every transformation and where it is known to be wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

from analyzers.errors import BadInputError, OptionValueError
from analyzers.graph.rank_graph import CAT_CODES
from analyzers.graph.set_graph import SetGraph
from analyzers.timeline import intervals as iv
from analyzers.timeline.user_regex import search_each

# name -> what the transformation does (the --fix help, docs/whatif.md)
FIXES: dict[str, str] = {
    "host-syncs": "blocking host syncs no longer block the host; the GPU-side order is kept as an event wait",
    "peer-wait": "no rank arrives late: each collective's transfer starts when the median rank arrives",
    "launch-gaps": "launches cost nothing, as under CUDA graphs: the host's time between launches is removed",
    "comm-contention": "communication runs at its uncontended speed (the median transfer of the same "
                       "kernel while no compute ran beside it) and is not slowed by compute in the replay",
    "serialized-streams": "the cross-stream event waits of communication on compute of another stream in the same "
                          "step are removed (a wait on the previous step, or on compute that writes the collective's "
                          "data by FSDP's module ranges, stays)",
    "no-copies": "copy and memset activities take no time (buffers preallocated, views instead of copies)",
    "drop": "drop=REGEX: GPU activities whose name matches REGEX take no time (a kernel removed)",
    "comm-speed": "comm-speed=F: communication transfers run F times as fast",
    "compute-speed": "compute-speed=F: compute kernels run F times as fast",
    "prefetch": "prefetch[=N]: each all-gather that compute waits for is issued N consumers ahead, its copy-in on "
                "a stream of its own (graph.moves)",
    "coalesce": "the send and receive of one ring step run as one kernel, as batch_isend_irecv does (graph.moves)",
    "agreed-order": "every rank runs its GPU-filling compute kernels, stream by stream, in the leader's order "
                    "(graph.agreed_order)",
    "comm-first": "communication that waited for a GPU-filling compute kernel to free SMs is dispatched before it, "
                  "as behind a gate kernel the compute waits for (graph.moves)",
}
SCALED = ("comm-speed", "compute-speed")
# A speed factor's range: a thousand times slower to a million times faster. Past it the question is
# not a what-if any more, and the scaled durations leave the int64 nanoseconds the replay adds them in
# (compute-speed=1e-14 made every kernel last 1e14 times longer and wrapped).
MIN_FACTOR, MAX_FACTOR = 1e-3, 1e6
# The replay's times must stay this far inside int64: the scaled durations of a rank, summed, are
# checked against it before a replay (apply_fixes), whatever the factor.
MAX_REPLAY_NS = 1 << 62

# finding id -> the fix that removes its cause
FIX_OF_FINDING: dict[str, str] = {
    "host-blocking-sync": "host-syncs",
    "serialized-streams": "serialized-streams",
    "cross-rank-order-mismatch": "peer-wait",
    "late-peer": "peer-wait",
    "launch-bound-gaps": "launch-gaps",
    "comm-slowed-by-overlap": "comm-contention",
    "comm-starved-by-compute": "comm-contention",
    "copy-kernels-block-overlap": "no-copies",
    "front-loaded-collectives": "prefetch",
}


@dataclass(frozen=True)
class Fix:
    name: str
    factor: float | None = None
    pattern: str | None = None  # drop=REGEX

    @property
    def label(self) -> str:
        if self.pattern is not None:
            return f"{self.name}={self.pattern}"
        return f"{self.name}={self.factor:g}" if self.factor is not None else self.name


def parse_fix(text: str) -> Fix:
    """'host-syncs', 'comm-speed=2' -> Fix; BadInputError on an unknown fix or a bad factor."""
    name, _, value = text.strip().partition("=")
    if name not in FIXES:
        raise BadInputError("--fix", f"unknown fix {name!r} (known: {', '.join(FIXES)})")
    if name in SCALED:
        try:
            factor = float(value)
        except ValueError:
            raise OptionValueError(f"--fix {name} needs a speed factor, e.g. {name}=2") from None
        if not np.isfinite(factor) or not MIN_FACTOR <= factor <= MAX_FACTOR:
            raise OptionValueError(f"--fix {name}={value}: the factor must lie between {MIN_FACTOR:g} and "
                                   f"{MAX_FACTOR:g} (a thousand times slower to a million times faster)")
        return Fix(name, factor)
    if name == "prefetch":
        if not value:
            return Fix(name, 1.0)
        if not value.isdigit() or int(value) < 1:
            raise BadInputError("--fix", f"prefetch={value}: the depth must be a whole number of consumers, 1 or more")
        return Fix(name, float(int(value)))
    if name == "drop":
        try:
            re.compile(value)
        except re.error as exc:
            raise BadInputError("--fix", f"drop={value}: not a regular expression ({exc})") from None
        if not value:
            raise BadInputError("--fix", "drop needs a kernel name pattern, e.g. drop=spin_kernel")
        return Fix(name, pattern=value)
    if value:
        raise BadInputError("--fix", f"{name} takes no value")
    return Fix(name)


@dataclass
class ReplayInputs:
    """What the replay reads that a fix may change."""

    dur: np.ndarray  # per node: duration (collective members: the transfer)
    off: np.ndarray  # per node: launching call's offset into its host segment
    latency: np.ndarray  # per node: launch latency
    dep: np.ndarray
    dep2: np.ndarray  # extra event waits (the host-syncs fix)
    sync_off: np.ndarray
    sync_blocks: np.ndarray  # per sync: the host waits for the GPU
    sync_cost: np.ndarray  # per sync: host time of the call when it does not block
    join: str = "max"  # "max" | "median"
    contention: bool = True  # communication slows beside compute (graph.contention); off: the comm-contention fix
    # SM residency (graph.residency): the compute kernel each node waits to release SMs, -1; and the
    # release's offset from that kernel's end (<= 0: its tail). Set by the replay loop, never by a fix
    gate: np.ndarray | None = None
    gate_lat: np.ndarray | None = None


def _shared(a: np.ndarray) -> np.ndarray:
    """A read-only view of the set graph's array: every replay's inputs share it until a fix writes (own)."""
    view = a.view()
    view.flags.writeable = False
    return view


def own(inp: ReplayInputs, name: str) -> np.ndarray:
    """inp's array `name`, copied first if it is shared (copy-on-write): what a fix writes in place into."""
    a = getattr(inp, name)
    if not a.flags.writeable:
        a = a.copy()
        setattr(inp, name, a)
    return a


SHARED = ("off", "latency", "sync_off")  # the inputs baseline_inputs shares with the graph


def unshared(sg: SetGraph, inp: ReplayInputs) -> ReplayInputs:
    """A copy of inp to send to another process that holds the same graph: each SHARED array still the graph's is
    None (not pickled: 0.27 MB a 14,400-activity rank); reshared() puts the receiver's own back."""
    return replace(inp, **{k: None for k in SHARED if _is_graphs(getattr(inp, k), getattr(sg, k))})


def _is_graphs(a: np.ndarray, mine: np.ndarray) -> bool:
    return a is mine or a.base is mine


def reshared(sg: SetGraph, inp: ReplayInputs) -> ReplayInputs:
    """inp with each SHARED array that no fix changed shared with the graph again: None from unshared(), or an
    equal copy (inputs that crossed a process boundary)."""
    for name in SHARED:
        a, mine = getattr(inp, name), getattr(sg, name)
        if a is None or (not _is_graphs(a, mine) and np.array_equal(a, mine)):
            setattr(inp, name, _shared(mine))
    return inp


def baseline_inputs(sg: SetGraph) -> ReplayInputs:
    """off, latency and sync_off are shared with the graph, read-only (own() before writing): 0.3 MB a rank of
    14,400 activities for every replay's inputs held at once."""
    dur = np.where(sg.coll >= 0, sg.transfer, sg.end - sg.start)
    return ReplayInputs(dur=dur.astype(np.int64), off=_shared(sg.off), latency=_shared(sg.latency), dep=sg.dep.copy(),
                        dep2=np.full(sg.n, -1, dtype=np.int64), sync_off=_shared(sg.sync_off),
                        sync_blocks=np.ones(len(sg.sync_seg), dtype=bool),
                        sync_cost=np.minimum(sg.sync_lat, sg.sync_dur).astype(np.int64))


def _uncontended(sg: SetGraph, dur: np.ndarray) -> np.ndarray:
    """Comm durations with overlapped ones replaced by the median of the same name and rank run alone."""
    out = dur.copy()
    comm = sg.cat == CAT_CODES["comm"]
    for r in sg.ranks:
        g = sg.graphs[r]
        b = sg.base[r]
        sl = slice(b, b + g.n)
        comp = g.cat == CAT_CODES["compute"]
        busy = iv.union(g.start[comp], g.end[comp])
        rows = np.flatnonzero(comm[sl])
        if not len(rows) or not len(busy[0]):
            continue
        overl = iv.overlaps_any(g.start[rows], g.end[rows], busy[0], busy[1])
        names = g.name_id[rows]
        for nm in np.unique(names).tolist():
            mine = names == nm
            alone = rows[mine & ~overl] + b
            if not len(alone):
                continue
            ref = int(np.median(dur[alone]))
            hit = rows[mine & overl] + b
            out[hit] = np.minimum(out[hit], ref)
    return out


# A rank's compute kernels run one at a time when at most this share of their summed time overlaps
# another compute kernel: each fills the GPU, so no replay may run two side by side at full speed.
MAX_COMPUTE_SELF_OVERLAP = 0.05


def _matching(sg: SetGraph, pattern: str) -> np.ndarray:
    """Per node: its name matches pattern (searched)."""
    parts = []
    for r in sg.ranks:
        g = sg.graphs[r]
        hit = search_each(pattern, g.names, "--fix drop=")
        parts.append(hit[g.name_id] if len(hit) else np.zeros(g.n, dtype=bool))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def _serial_compute_ranks(sg: SetGraph) -> list[int]:
    out = []
    for r in sg.ranks:
        g = sg.graphs[r]
        comp = g.cat == CAT_CODES["compute"]
        total = int((g.end[comp] - g.start[comp]).sum())
        if total and 1 - iv.total_length(g.start[comp], g.end[comp]) / total <= MAX_COMPUTE_SELF_OVERLAP:
            out.append(r)
    return out


def _compute_in_series(sg: SetGraph, inp: ReplayInputs) -> None:
    """On ranks whose compute kernels never ran side by side, each compute kernel waits for the previous
    one (measured order) of another stream, where it had ended when this one started: a fix that
    removes a wait or a sync must not let two GPU-filling kernels run at once at full speed."""
    cached = getattr(sg, "_series_edges", None)
    if cached is None:
        cached = _series_edges(sg)
        sg._series_edges = cached  # type: ignore[attr-defined]  (the same for every fix)
    tgt, src = cached
    free = inp.dep2[tgt] < 0
    inp.dep2[tgt[free]] = src[free]


def _series_edges(sg: SetGraph) -> tuple[np.ndarray, np.ndarray]:
    none = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    comp = np.flatnonzero((sg.cat == CAT_CODES["compute"]) & np.isin(sg.rank_of, _serial_compute_ranks(sg)))
    if len(comp) < 2:
        return none
    o = comp[np.lexsort((sg.start[comp], sg.rank_of[comp]))]
    stream = np.concatenate([sg.graphs[r].stream for r in sg.ranks])
    same = (sg.rank_of[o[1:]] == sg.rank_of[o[:-1]]) & (stream[o[1:]] != stream[o[:-1]])
    tgt, src = o[1:][same], o[:-1][same]
    ok = (sg.order_key[src] < sg.order_key[tgt]) & (sg.end[src] <= sg.start[tgt])
    return tgt[ok], src[ok]


def _module_roles(sg: SetGraph) -> np.ndarray:
    """Per node: its FSDP role (graph.dataflow; 0 where the op tree or Execution Trace names none)."""
    parts = [g.role if len(g.role) == g.n else np.zeros(g.n, dtype=np.int8) for g in (sg.graphs[r] for r in sg.ranks)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int8)


def _serializing_waits(sg: SetGraph, dep: np.ndarray) -> np.ndarray:
    """Per node: its wait is one the serialized-streams fix removes: communication waiting for compute of another
    stream in the same step, except compute that FSDP's module ranges give a role (graph.dataflow): a module's
    copy-in, forward or backward writes what its collectives read (the all-gather its copy-in, the reduce-scatter
    the gradients), so that wait is the data's. Removed, the reduce-scatters ran before their gradients existed and
    fsdp/zero2's step replayed in 68 ms against 156."""
    src = np.maximum(dep, 0)
    drop = (dep >= 0) & (sg.cat == CAT_CODES["comm"]) & (sg.cat[src] == CAT_CODES["compute"])
    drop &= sg.step[src] == sg.step
    return drop & (_module_roles(sg)[src] == 0)


def apply_fixes(sg: SetGraph, fixes: list[Fix]) -> ReplayInputs:
    """The replay inputs with every fix applied, in order (compute kept in series where it ran so)."""
    inp = baseline_inputs(sg)
    _compute_in_series(sg, inp)
    for fix in fixes:
        if fix.name == "host-syncs":
            inp.sync_blocks[:] = False
            pairs = sg.sync_after
            aw = sg.sync_awaited[pairs[:, 0]] if len(pairs) else np.zeros(0, dtype=np.int64)
            ok = aw >= 0
            ok[ok] = sg.order_key[aw[ok]] < sg.order_key[pairs[ok, 1]]  # edges the replay's order can honour
            inp.dep2[pairs[ok, 1]] = aw[ok]
        elif fix.name == "peer-wait":
            inp.join = "median"
        elif fix.name == "launch-gaps":
            inp.off = np.zeros_like(inp.off)
        elif fix.name == "comm-contention":
            inp.dur = _uncontended(sg, inp.dur)
            inp.contention = False
        elif fix.name == "serialized-streams":
            inp.dep = np.where(_serializing_waits(sg, inp.dep), -1, inp.dep)
        elif fix.name == "no-copies":
            copies = (sg.cat == CAT_CODES["copy"]) | (sg.cat == CAT_CODES["memset"])
            inp.dur = np.where(copies, 0, inp.dur)
        elif fix.name == "drop":
            inp.dur = np.where(_matching(sg, fix.pattern or ""), 0, inp.dur)
        elif fix.name in SCALED:
            code = CAT_CODES["comm" if fix.name == "comm-speed" else "compute"]
            sel = sg.cat == code
            inp.dur = np.where(sel, _scaled(inp.dur, float(fix.factor or 1.0), fix.label, sg), inp.dur)
    return inp


def _scaled(dur: np.ndarray, factor: float, label: str, sg: SetGraph) -> np.ndarray:
    """dur / factor, rounded, in int64; an OptionValueError where the replay's times would leave
    int64 (the durations, summed, past MAX_REPLAY_NS beside the trace's own times), never a wrap."""
    scaled = np.round(dur.astype(np.float64) / factor)
    reach = float(np.abs(scaled).sum()) + float(max(np.abs(sg.start).max(initial=0), np.abs(sg.end).max(initial=0)))
    if not np.isfinite(reach) or reach >= MAX_REPLAY_NS:
        raise OptionValueError(f"--fix {label}: the scaled durations would not fit the replay's int64 "
                               "nanoseconds; use a factor nearer 1")
    return scaled.astype(np.int64)
