"""The findings engine: per-rank detectors that say *why* overlap was lost, with evidence.

Each detector reads one rank's tables (and, for comm-slowed-by-overlap, its peers' to strip
peer wait), decides against named thresholds (FindingParams) and returns Finding objects
from the catalogue in analyzers/finding.py. Cross-rank findings (late-peer,
cross-rank-order-mismatch) come from analyzers/crossrank.py and are passed in through
``extra``. Every detector is built so that a healthy look-alike trace stays silent: each
condition that fires is paired with the condition that tells the healthy pattern apart.

Interval work is vectorized (analyzers/intervals.py); Python loops run over iterations,
devices, streams and collective kinds, never over kernel rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields

import numpy as np
import pandas as pd

from . import intervals as iv
from .finding import Finding, Severity, sort_findings
from .iterations import DEFAULT_STEP_PATTERN, gpu_step_windows, host_steps, launch_times
from .kernel_names import normalize_kernel_name
from .metrics import RankMetrics
from .model import RankTrace, TraceSet
from .syncs import SyncParams, api_base_name, blocking_syncs, busy_before

# Pack/unpack and layout copies that run as kernels (or DtoD copies) next to collectives.
NO_CALLER = "(no enclosing op)"
DEFAULT_COPY_KERNEL_PATTERN = (
    r"CatArrayBatchedCopy|direct_copy_kernel|copy_kernel|elementwise_kernel.*[Cc]opy|chunk_cat|"
    r"split_with_sizes_copy|_foreach_copy|multi_tensor_apply_kernel.*native::Copy<|^Memcpy DtoD"
)


@dataclass(frozen=True)
class FindingParams:
    """Every threshold the detectors use, with its default and why it has that value."""

    # ---- shared -------------------------------------------------------------------------
    critical_share: float = 0.10
    """A finding whose cost (GPU time lost) is at least this share of the analysed GPU span is
    'critical'; below, 'warning'."""
    copy_kernel_pattern: str = DEFAULT_COPY_KERNEL_PATTERN
    """Regex (re.search on the activity name) of copy kernels: they are neither compute that hides
    communication nor communication (default rules class them as compute)."""
    step_pattern: str = DEFAULT_STEP_PATTERN
    """Host ranges that are iterations (ProfilerStep#N); without any, the trace is one window."""
    sync: SyncParams = field(default_factory=SyncParams)
    """What counts as a blocking host sync (analyzers/syncs.py)."""

    # ---- host-blocking-sync ----------------------------------------------------------------
    sync_min_idle_ns: int = 5_000
    """A sync counts when the GPU idle it caused is at least this (5 µs: more than a launch
    latency; below, the GPU still had queued work and the sync cost nothing)."""
    sync_min_total_idle_ns: int = 20_000
    """The finding needs at least this much caused idle over all counted syncs (20 µs)."""

    # ---- serialized-streams ----------------------------------------------------------------
    serial_min_stream_share: float = 0.10
    """A stream takes part when its busy time is at least this share of the iteration's busy time."""
    serial_max_concurrent_share: float = 0.05
    """'Concurrent time ≈ 0': time with two or more of those streams busy is at most this share of
    the least busy one's time."""
    serial_min_iteration_share: float = 0.5
    """Fires when at least this share of iterations is serialized (one odd iteration is not a schedule)."""

    # ---- front-loaded-collectives -------------------------------------------------------------
    front_compute_start_share: float = 0.02
    """Compute 'starts' once this share of the iteration's compute time has run, so a few tiny
    preamble kernels (index setup, fills) do not count as the first compute."""
    front_min_share: float = 0.75
    """Share of one collective kind's time (e.g. all-gathers) that runs before compute starts."""
    front_min_collectives: int = 2
    """At least this many collectives of that kind start before compute: one collective ahead of
    its consumer is a pipeline's first step, not front-loading."""
    front_min_window_share: float = 0.05
    """Compute must start at least this share of the iteration's span after the iteration begins:
    collectives up front that delay compute by less cost little."""
    front_min_comm_share: float = 0.01
    """The communication before compute starts must be at least this share of the iteration's
    span: a couple of tiny broadcasts of the batch ahead of compute are not front-loading, however
    late compute starts for other reasons."""
    front_min_iteration_share: float = 0.5
    """Fires when at least this share of iterations is front-loaded."""

    # ---- copy-kernels-block-overlap -----------------------------------------------------------
    copy_adjacent_ns: int = 20_000
    """A copy kernel is 'adjacent' to a collective when it runs within this gap of one (20 µs)."""
    copy_min_share: float = 0.15
    """Exposed adjacent copy time over the exposed comm window (exposed comm + those copies)."""
    copy_min_span_share: float = 0.01
    """The exposed adjacent copies must also be at least this share of the analysed span."""

    # ---- launch-bound-gaps -----------------------------------------------------------------
    launch_min_gap_ns: int = 10_000
    """An idle gap counts when at least this long (10 µs: several launch latencies)."""
    launch_min_gaps: int = 3
    """At least this many launch-bound gaps (one slow launch is not a pattern)."""
    launch_min_share: float = 0.05
    """Their total must be at least this share of the analysed GPU span."""

    # ---- comm-slowed-by-overlap -------------------------------------------------------------
    slow_overlapped_min_fraction: float = 0.5
    """A collective is 'overlapped' when compute runs during at least this share of it."""
    slow_alone_max_fraction: float = 0.05
    """A collective is 'alone' when compute runs during at most this share of it."""
    slow_min_samples: int = 3
    """Each side (alone, overlapped) needs this many samples of the same collective and size. Only
    collectives whose size the trace records are compared (sizes mixed together say nothing)."""
    slow_min_slowdown: float = 0.10
    """Fires when median overlapped duration / median alone duration - 1 is at least this (10%:
    beyond the run-to-run spread of a collective's median over a few samples)."""
    slow_warning_slowdown: float = 0.25
    """Below this slowdown the finding is 'info' (overlap still pays, at a visible price); from it
    on 'warning'; 'critical' when the extra communication time reaches critical_share of the span."""
    slow_use_transfer_time: bool = True
    """With several ranks on a shared clock, measure each collective from its last rank's arrival
    (the transfer part), so that waiting for a late peer is not taken for slowness."""
    slow_max_end_skew_ns: int = 50_000
    """Clocks count as shared when matched collectives end within this of each other (median)."""

    # ---- comm-starved-by-compute ---------------------------------------------------------------
    starve_min_delay_ns: int = 50_000
    """A communication kernel counts when it started at least this long after it was eligible
    (launched, its stream's earlier work done, and nothing else on the device ended in between that
    it could have waited on): 50 µs is far beyond a dispatch latency of a few µs."""
    starve_blocker_slack_ns: int = 20_000
    """The compute kernel that held the SMs started no later than this after the comm kernel was
    eligible (it won the dispatch), and was still running when the comm kernel started."""
    starve_min_total_ns: int = 100_000
    """The finding needs at least this much starved delay in total (100 µs)."""

    @classmethod
    def field_docs(cls) -> dict[str, tuple[object, str]]:
        """{name: (default, doc)} read from the attribute docstrings above (for docs and --help)."""
        import ast
        import inspect

        tree = ast.parse(inspect.getsource(cls))
        body = tree.body[0].body  # type: ignore[attr-defined]
        docs: dict[str, str] = {}
        for a, b in zip(body, body[1:], strict=False):
            if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant):
                docs[a.target.id] = " ".join(str(b.value.value).split())  # type: ignore[attr-defined]
        defaults = cls()
        return {f.name: (getattr(defaults, f.name), docs.get(f.name, "")) for f in fields(cls) if f.name != "sync"}


# ------------------------------------------------------------------------------------------
# Shared helpers


def _plain(v: object) -> object:
    """JSON-safe evidence values (numpy scalars -> Python, NaN -> None)."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.ndarray):
        return [_plain(x) for x in v.tolist()]
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        v = float(v)
    if isinstance(v, float) and not np.isfinite(v):
        return None
    return v


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def _us(ns: float) -> str:
    return f"{ns / 1e3:.1f} µs"


def windows_of(trace: RankTrace, metrics: RankMetrics | None, step_pattern: str) -> pd.DataFrame:
    """The iteration windows to analyse: step, lo, hi (GPU clock), host_lo, host_hi.

    The windows the metrics used when given (so --steps applies), else the trace's step
    windows, else the whole trace as one window (step -1).
    """
    cols = ["step", "lo", "hi", "host_lo", "host_hi"]
    steps = host_steps(trace, step_pattern)
    host = steps.set_index("step")[["host_start_ns", "host_end_ns"]] if not steps.empty else None
    if metrics is not None and not metrics.iterations.empty:
        it = metrics.iterations
        w = pd.DataFrame({"step": it["step"].astype(np.int64).to_numpy(),
                          "lo": it["window_start_ns"].astype(np.int64).to_numpy(),
                          "hi": it["window_end_ns"].astype(np.int64).to_numpy()})
    else:
        g = gpu_step_windows(trace, step_pattern)
        if not g.empty:
            w = pd.DataFrame({"step": g["step"].astype(np.int64).to_numpy(),
                              "lo": g["gpu_start_ns"].astype(np.int64).to_numpy(),
                              "hi": g["gpu_end_ns"].astype(np.int64).to_numpy()})
        elif metrics is not None:
            w = pd.DataFrame({"step": [-1], "lo": [metrics.whole.window_start_ns],
                              "hi": [metrics.whole.window_end_ns]})
        elif not trace.gpu.empty:
            w = pd.DataFrame({"step": [-1], "lo": [int(trace.gpu["start_ns"].min())],
                              "hi": [int(trace.gpu["end_ns"].max())]})
        else:
            return pd.DataFrame({c: np.zeros(0, dtype=np.int64) for c in cols})
    if host is not None:
        w["host_lo"] = host["host_start_ns"].reindex(w["step"]).fillna(-1).to_numpy(np.int64)
        w["host_hi"] = host["host_end_ns"].reindex(w["step"]).fillna(-1).to_numpy(np.int64)
    else:
        w["host_lo"] = -1
        w["host_hi"] = -1
    return w[cols].astype(np.int64).reset_index(drop=True)


@dataclass
class _RankView:
    """One rank's GPU rows with the masks every detector needs, computed once."""

    trace: RankTrace
    params: FindingParams
    windows: pd.DataFrame
    s: np.ndarray = field(init=False)
    e: np.ndarray = field(init=False)
    device: np.ndarray = field(init=False)
    stream: np.ndarray = field(init=False)
    names: np.ndarray = field(init=False)
    comm: np.ndarray = field(init=False)
    compute: np.ndarray = field(init=False)  # real compute: compute minus copy kernels
    copy: np.ndarray = field(init=False)
    other: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        g = self.trace.gpu
        self.s = g["start_ns"].to_numpy(np.int64)
        self.e = g["end_ns"].to_numpy(np.int64)
        self.device = g["device"].to_numpy(np.int64)
        self.stream = g["stream"].to_numpy(np.int64)
        self.names = self.trace.names_of(g["name_id"].to_numpy()) if len(g) else np.zeros(0, dtype=object)
        cat = g["category"].to_numpy()
        rx = re.compile(self.params.copy_kernel_pattern)
        ids = g["name_id"].to_numpy()
        uniq, inv = np.unique(ids, return_inverse=True) if ids.size else (ids, ids)
        is_copy = np.array([bool(rx.search(self.trace.name_of(int(u)))) for u in uniq], dtype=bool)
        copy_name = is_copy[inv] if ids.size else np.zeros(0, dtype=bool)
        self.comm = cat == "comm"
        self.copy = copy_name & ~self.comm
        self.compute = (cat == "compute") & ~self.copy
        self.other = ~(self.comm | self.compute | self.copy)

    @property
    def lo(self) -> int:
        return int(self.windows["lo"].min()) if not self.windows.empty else 0

    @property
    def hi(self) -> int:
        return int(self.windows["hi"].max()) if not self.windows.empty else 0

    def in_range(self, lo: int, hi: int) -> np.ndarray:
        return (self.e > lo) & (self.s < hi)

    def in_windows(self) -> np.ndarray:
        """Rows inside some analysed window: with --steps 2,5 the steps between are not analysed."""
        out = np.zeros(self.s.size, dtype=bool)
        for lo, hi in zip(self.windows["lo"].to_numpy(np.int64), self.windows["hi"].to_numpy(np.int64), strict=True):
            out |= self.in_range(int(lo), int(hi))
        return out

    def span_ns(self) -> int:
        """Sum of the analysed windows (the denominator of 'share of time')."""
        return int((self.windows["hi"] - self.windows["lo"]).clip(lower=0).sum())

    def devices(self) -> list[int]:
        return sorted(np.unique(self.device).tolist())


def _per_name(view: _RankView, rows: np.ndarray, fn: Callable[[str], str]) -> np.ndarray:
    """fn of each selected row's name, computed once per distinct name (rows: mask or indices)."""
    ids = view.trace.gpu["name_id"].to_numpy()[rows]
    if ids.size == 0:
        return np.zeros(0, dtype=object)
    uniq, inv = np.unique(ids, return_inverse=True)
    return np.array([fn(view.trace.name_of(int(u))) for u in uniq], dtype=object)[inv]


def _copy_label(pattern: str) -> Callable[[str], str]:
    """Name -> the part of it the copy pattern matched ("CatArrayBatchedCopy", "direct_copy_kernel")."""
    rx = re.compile(pattern)

    def label(name: str) -> str:
        m = rx.search(name)
        if not m:
            return normalize_kernel_name(name)
        text = m.group(0)
        idents = re.findall(r"[A-Za-z_]\w*", text)
        if not idents or re.fullmatch(r"[\w ]+", text):
            return text  # "CatArrayBatchedCopy", "Memcpy DtoD"
        copyish = [i for i in idents[1:] if "copy" in i.lower()]
        return f"{idents[0]} ({copyish[-1]})" if copyish and "copy" not in idents[0].lower() else idents[0]

    return label


def _severity(cost_ns: float, span_ns: int, params: FindingParams) -> Severity:
    return Severity.critical if span_ns > 0 and cost_ns >= params.critical_share * span_ns else Severity.warning


# ------------------------------------------------------------------------------------------
# host-blocking-sync


def syncs_in_overlap_region(view: _RankView, syncs: pd.DataFrame) -> pd.DataFrame:
    """The blocking syncs that cost overlap, with region_step (the iteration they belong to).

    A sync is *in the overlapped region* when it starts between an iteration's first and last
    comm kernel, or while comm is in flight on its device during the call. With iteration
    ranges, every sync of an iteration that has one such sync counts (the sync after the last
    step's collective blocks the same pipeline; whether that collective had just ended when the
    host got there is timing), and syncs outside the analysed iterations (the profiler's own
    cudaDeviceSynchronize at the end) never count. A sync after which nothing is launched (at the
    very end of the recorded work) is never in the region: there is nothing left to overlap.
    Each counted sync left the GPU idle at least sync_min_idle_ns.
    """
    p = view.params
    if syncs.empty or not view.comm.any() or view.windows.empty:
        return syncs.iloc[0:0].assign(region_step=np.zeros(0, dtype=np.int64))
    start = syncs["start_ns"].to_numpy(np.int64)
    end = syncs["end_ns"].to_numpy(np.int64)
    dev = syncs["device"].to_numpy(np.int64)
    in_region = np.zeros(start.size, dtype=bool)
    region_step = np.full(start.size, -1, dtype=np.int64)
    w = view.windows
    for d in view.devices():
        cm = view.comm & (view.device == d)
        ms, me = iv.union(view.s[cm], view.e[cm])
        on = dev == d
        # comm in flight at some point of the host call
        in_flight = (busy_before(ms, me, end[on] + 1) - busy_before(ms, me, start[on])) > 0
        # between the first and the last comm kernel of its iteration (GPU clock)
        reg_lo = np.full(len(w), -1, dtype=np.int64)
        reg_hi = np.full(len(w), -1, dtype=np.int64)
        for i, (lo, hi) in enumerate(zip(w["lo"].to_numpy(), w["hi"].to_numpy(), strict=True)):
            sel = cm & view.in_range(int(lo), int(hi))
            if sel.any():
                reg_lo[i], reg_hi[i] = max(int(view.s[sel].min()), int(lo)), min(int(view.e[sel].max()), int(hi))
        order = np.argsort(reg_lo, kind="stable")
        rl, rh, rs = reg_lo[order], reg_hi[order], w["step"].to_numpy()[order]
        k = np.searchsorted(rl, start[on], side="right") - 1
        kc = np.clip(k, 0, max(rl.size - 1, 0))
        between = (k >= 0) & (rl[kc] >= 0) & (start[on] < rh[kc])
        in_region[on] = (in_flight | between) & (syncs["next_gpu_start_ns"].to_numpy(np.int64)[on] >= 0)
        region_step[on] = np.where(between, rs[kc], -1)
    idle_ok = syncs["gpu_idle_ns"].to_numpy(np.int64) >= p.sync_min_idle_ns
    host_step = syncs["step"].to_numpy(np.int64)
    steps = w["step"].to_numpy(np.int64)
    if (steps >= 0).any() and (w["host_lo"].to_numpy() >= 0).any():
        in_steps = np.isin(host_step, steps[steps >= 0])
        hit_steps = np.unique(host_step[in_region & in_steps & idle_ok])
        counted = np.isin(host_step, hit_steps) & in_steps & idle_ok
        region_step = host_step
    else:
        counted = in_region & idle_ok
    return syncs[counted].assign(region_step=region_step[counted])


def detect_host_blocking_sync(view: _RankView, syncs: pd.DataFrame | None = None) -> list[Finding]:
    """Blocking syncs in the overlapped region (syncs_in_overlap_region) that left the GPU idle.

    Silent on: iterations whose syncs all come before / after their communication (loss.item()
    at the end of a step), syncs that leave the GPU busy (queued work), the profiler's own sync
    after the last step, traces without communication.
    """
    p, t = view.params, view.trace
    syncs = blocking_syncs(t, p.sync) if syncs is None else syncs
    c = syncs_in_overlap_region(view, syncs).copy()
    if c.empty or c["gpu_idle_ns"].sum() < p.sync_min_total_idle_ns:
        return []
    c["step"] = np.where(c["step"] >= 0, c["step"], c["region_step"])
    per_step = c[c["step"] >= 0].groupby("step").size()
    total_idle = int(c["gpu_idle_ns"].sum())
    who = (c["sync_op"].where(c["sync_op"] != "", c["caller"]).where(lambda x: x != "", c["annotation"])
           .where(lambda x: x != "", c["frame"]).replace("", NO_CALLER))
    callers = (c.assign(who=who).groupby("who").agg(n=("api", "size"), gpu_idle_ns=("gpu_idle_ns", "sum"))
               .sort_values("gpu_idle_ns", ascending=False).head(5))
    apis = c.groupby("api").size().sort_values(ascending=False)
    n_steps = int(per_step.size)
    per_it = float(per_step.median()) if n_steps else None
    evidence = {
        "n_syncs": int(len(c)),
        "n_iterations_with_syncs": n_steps,
        "n_iterations": int(len(view.windows)),
        "syncs_per_iteration_median": per_it,
        "syncs_per_iteration": {int(k): int(v) for k, v in per_step.items()},
        "gpu_idle_ns_total": total_idle,
        "gpu_idle_ns_median": float(c["gpu_idle_ns"].median()),
        "host_blocked_ns_total": int(c["host_blocked_ns"].sum()),
        "share_of_span": total_idle / view.span_ns() if view.span_ns() else None,
        "apis": {str(k): int(v) for k, v in apis.items()},
        "callers": [{"caller": str(k), "n": int(r.n), "gpu_idle_ns": int(r.gpu_idle_ns)}
                    for k, r in callers.iterrows()],
        "n_blocking_syncs_all": int(len(syncs)),
    }
    top = callers.index[0] if len(callers) else NO_CALLER
    from_txt = f" (mostly from {top})" if top != NO_CALLER else ""
    per_txt = f" ({per_it:g} per iteration)" if per_it is not None else ""
    title = (f"rank {t.rank}: {len(c)} blocking host syncs{per_txt} inside the overlapped region left the GPU "
             f"idle {_ms(total_idle)}")
    explanation = (
        f"The host called {', '.join(apis.index[:3])}{from_txt} while communication was in flight "
        f"or still to come in the iteration. Each call blocks the host until the GPU finishes, so nothing new "
        f"is queued: the GPU drains and sits idle for {_us(evidence['gpu_idle_ns_median'])} (median) until the "
        f"next launch arrives, and the collectives that should overlap with compute run alone."
    )
    return [Finding(
        id="host-blocking-sync", severity=_severity(total_idle, view.span_ns(), p), ranks=[t.rank],
        title=title, explanation=explanation,
        start_ns=int(c["start_ns"].min()), end_ns=int(c["end_ns"].max()), evidence=_plain(evidence),
    )]


# ------------------------------------------------------------------------------------------
# serialized-streams


def _stream_groups(view: _RankView, mask: np.ndarray, lo: int, hi: int) -> dict[int, iv.Intervals]:
    """Merged busy intervals per stream of the selected rows, clipped to [lo, hi)."""
    out: dict[int, iv.Intervals] = {}
    sel = mask & view.in_range(lo, hi)
    if not sel.any():
        return out
    s, e, st = np.clip(view.s[sel], lo, hi), np.clip(view.e[sel], lo, hi), view.stream[sel]
    order = np.argsort(st, kind="stable")
    st_o = st[order]
    cuts = np.flatnonzero(np.diff(st_o)) + 1
    for stream, ss, ee in zip(st_o[np.r_[0, cuts]] if st_o.size else [], np.split(s[order], cuts),
                              np.split(e[order], cuts), strict=True):
        out[int(stream)] = iv.union(ss, ee)
    return out


def _switches(groups: dict[int, iv.Intervals]) -> int:
    """How often the GPU timeline passes from one stream's busy interval to another's."""
    labels = np.concatenate([np.full(g[0].size, k, dtype=np.int64) for k, g in groups.items()])
    starts = np.concatenate([g[0] for g in groups.values()])
    seq = labels[np.argsort(starts, kind="stable")]
    return int((seq[1:] != seq[:-1]).sum())


def detect_serialized_streams(view: _RankView, syncs: pd.DataFrame | None = None) -> list[Finding]:
    """Two or more streams with substantial work that interleave in time yet are never busy at once.

    Interleave: the time-ordered busy intervals switch streams at least as many times as there
    are streams (some stream resumes after another ran). Silent on: a non-overlapped baseline
    (one phase per stream per iteration), pipelines where any stream pair runs concurrently, a
    single stream, iterations that host-blocking-sync explains (the host, not a stream
    dependency, serialized them).
    """
    p, t = view.params, view.trace
    work = ~view.other
    syncs = blocking_syncs(t, p.sync) if syncs is None else syncs
    by_host = syncs_in_overlap_region(view, syncs)
    host_steps_hit = set(by_host["region_step"].tolist()) - {-1}
    host_serialized = np.sort(by_host["end_ns"].to_numpy(np.int64))
    per_window = []
    for w in view.windows.itertuples(index=False):
        if w.step in host_steps_hit or (
                np.searchsorted(host_serialized, w.hi) > np.searchsorted(host_serialized, w.lo)):
            continue
        for d in view.devices():
            groups = _stream_groups(view, work & (view.device == d), int(w.lo), int(w.hi))
            if len(groups) < 2:
                continue
            busy_all = iv.length(iv.union(np.concatenate([g[0] for g in groups.values()]),
                                          np.concatenate([g[1] for g in groups.values()])))
            busy = {k: iv.length(g) for k, g in groups.items()}
            big = {k: g for k, g in groups.items() if busy[k] >= p.serial_min_stream_share * busy_all}
            if len(big) < 2:
                continue
            conc = iv.length(iv.covered_by_at_least(list(big.values()), 2))
            min_busy = min(busy[k] for k in big)
            switches = _switches(big)
            serialized = switches >= len(big) and conc <= p.serial_max_concurrent_share * min_busy
            per_window.append({"step": int(w.step), "device": d, "lo": int(w.lo), "hi": int(w.hi),
                               "host_lo": int(w.host_lo), "host_hi": int(w.host_hi),
                               "streams": sorted(big), "busy": {k: busy[k] for k in sorted(big)},
                               "concurrent_ns": conc, "switches": switches, "serialized": serialized})
    n_windows = len(view.windows)
    hits = [r for r in per_window if r["serialized"]]
    if not hits or len(hits) < p.serial_min_iteration_share * n_windows:
        return []
    streams = sorted({s for r in hits for s in r["streams"]})
    busy_tot = {s: sum(r["busy"].get(s, 0) for r in hits) for s in streams}
    comm_streams = sorted(set(np.unique(view.stream[view.comm]).tolist()) & set(streams))
    # the inter-stream waits the host issued inside those iterations (the chain that serializes)
    rt = t.runtime
    waits_per_it: dict[int, int] = {}
    if not rt.empty and any(r["host_lo"] >= 0 for r in hits):
        is_wait = np.array([api_base_name(n) == "cudaStreamWaitEvent" for n in t.names_of(rt["name_id"].to_numpy())],
                           dtype=bool)
        ws = np.sort(rt["start_ns"].to_numpy(np.int64)[is_wait])
        for r in hits:
            if r["host_lo"] >= 0:
                waits_per_it[r["step"]] = int(np.searchsorted(ws, r["host_hi"]) - np.searchsorted(ws, r["host_lo"]))
    span_hits = sum(r["hi"] - r["lo"] for r in hits)
    evidence = {
        "n_iterations_serialized": len(hits),
        "n_iterations": n_windows,
        "streams": streams,
        "comm_streams": comm_streams,
        "busy_ns_per_stream": busy_tot,
        "concurrent_ns": int(sum(r["concurrent_ns"] for r in hits)),
        "stream_switches_median": float(np.median([r["switches"] for r in hits])),
        "stream_wait_event_calls_per_iteration": waits_per_it or None,
        "serialized_span_ns": int(span_hits),
    }
    lost = min(busy_tot.values())  # what full concurrency of the two least busy streams could hide
    sev = Severity.critical if comm_streams else _severity(lost, view.span_ns(), p)
    waits_txt = ""
    if waits_per_it:
        waits_txt = (f" The host issued {int(np.median(list(waits_per_it.values())))} cudaStreamWaitEvent calls "
                     f"per iteration inside the loop: these inter-stream waits chain the streams one after another.")
    busy_txt = ", ".join(f"stream {s}: {_ms(b)}" for s, b in busy_tot.items())
    title = (f"rank {t.rank}: streams {', '.join(map(str, streams))} interleave but never run concurrently "
             f"({len(hits)}/{n_windows} iterations)")
    explanation = (
        f"Work alternates between streams {', '.join(map(str, streams))} ({busy_txt}) yet "
        + (f"only {_us(evidence['concurrent_ns'])}" if evidence["concurrent_ns"] else "none")
        + " of it ran concurrently: each stream's work waits for the other "
        "stream's, so the multi-stream schedule runs as one serial chain"
        + (" and its communication is never hidden." if comm_streams else ".") + waits_txt
    )
    return [Finding(
        id="serialized-streams", severity=sev, ranks=[t.rank], title=title, explanation=explanation,
        start_ns=int(min(r["lo"] for r in hits)), end_ns=int(max(r["hi"] for r in hits)), evidence=_plain(evidence),
    )]


# ------------------------------------------------------------------------------------------
# front-loaded-collectives


def _time_reaching(ms: np.ndarray, me: np.ndarray, amount: float) -> int:
    """First time at which the merged intervals have covered `amount` ns."""
    lens = me - ms
    cum = np.cumsum(lens)
    i = int(np.searchsorted(cum, amount, side="left"))
    i = min(i, ms.size - 1)
    before = cum[i - 1] if i > 0 else 0
    return int(ms[i] + max(amount - before, 0))


def comm_kind(view: _RankView) -> np.ndarray:
    """Collective kind per GPU row: the collective name when known, else the kernel name."""
    coll = view.trace.gpu["coll_name"].to_numpy(dtype=object)
    return np.where(coll != "", coll, view.names)


def detect_front_loaded(view: _RankView) -> list[Finding]:
    """Most of an iteration's collectives of one kind run before its compute starts.

    Silent on: pipelines whose first step's collective precedes compute (one collective,
    or less than front_min_share of that kind), collectives after compute (DDP), tiny
    collectives before compute, iterations without compute.
    """
    p, t = view.params, view.trace
    kinds = comm_kind(view)
    rows = []
    for w in view.windows.itertuples(index=False):
        lo, hi = int(w.lo), int(w.hi)
        for d in view.devices():
            on = view.in_range(lo, hi) & (view.device == d)
            cm, cp = on & view.comm, on & view.compute
            if not cm.any() or not cp.any():
                continue
            ps, pe = iv.union(np.clip(view.s[cp], lo, hi), np.clip(view.e[cp], lo, hi))
            c_start = _time_reaching(ps, pe, p.front_compute_start_share * iv.length((ps, pe)))
            all_before = iv.length(iv.clip(*iv.union(view.s[cm], view.e[cm]), lo, c_start))
            best = None
            for k in np.unique(kinds[cm]):
                km = cm & (kinds == k)
                ks, ke = iv.union(np.clip(view.s[km], lo, hi), np.clip(view.e[km], lo, hi))
                total = iv.length((ks, ke))
                before = iv.length(iv.clip(ks, ke, lo, c_start))
                n_before = int((view.s[km] < c_start).sum())
                share = before / total if total else 0.0
                cand = {"kind": str(k), "share": share, "n_before": n_before, "n_kind": int(km.sum()),
                        "before_ns": before, "kind_ns": total}
                if best is None or share > best["share"]:
                    best = cand
                if share >= p.front_min_share and n_before >= p.front_min_collectives:
                    best = cand
                    break
            front = (best is not None and best["share"] >= p.front_min_share
                     and best["n_before"] >= p.front_min_collectives
                     and c_start - lo >= p.front_min_window_share * (hi - lo)
                     and all_before >= p.front_min_comm_share * (hi - lo))
            rows.append({"step": int(w.step), "lo": lo, "hi": hi, "compute_start_ns": c_start,
                         "comm_before_ns": all_before, "front": front, **(best or {})})
    n_windows = len(view.windows)
    hits = [r for r in rows if r["front"]]
    if not hits or len(hits) < p.front_min_iteration_share * n_windows:
        return []
    before_tot = int(sum(r["comm_before_ns"] for r in hits))
    kinds_hit = sorted({r["kind"] for r in hits})
    evidence = {
        "n_iterations_front_loaded": len(hits),
        "n_iterations": n_windows,
        "collective": kinds_hit[0] if len(kinds_hit) == 1 else kinds_hit,
        "share_before_compute_median": float(np.median([r["share"] for r in hits])),
        "collectives_before_compute_median": float(np.median([r["n_before"] for r in hits])),
        "collectives_of_kind_median": float(np.median([r["n_kind"] for r in hits])),
        "comm_before_compute_ns_total": before_tot,
        "compute_start_offset_ns_median": float(np.median([r["compute_start_ns"] - r["lo"] for r in hits])),
        "per_iteration": [{"step": r["step"], "share": round(r["share"], 4), "n_before": r["n_before"],
                           "comm_before_ns": r["comm_before_ns"]} for r in hits],
    }
    title = (f"rank {t.rank}: {evidence['share_before_compute_median']:.0%} of {kinds_hit[0]} time runs before "
             f"compute starts ({len(hits)}/{n_windows} iterations)")
    explanation = (
        f"In each affected iteration {evidence['collectives_before_compute_median']:g} of "
        f"{evidence['collectives_of_kind_median']:g} {kinds_hit[0]} collectives start before compute does "
        f"({_ms(evidence['compute_start_offset_ns_median'])} into the iteration, median): the program issues its "
        f"collectives and waits for them up front, so {_ms(before_tot / len(hits))} of communication per "
        f"iteration has nothing to hide behind."
    )
    return [Finding(
        id="front-loaded-collectives", severity=_severity(before_tot, view.span_ns(), p), ranks=[t.rank],
        title=title, explanation=explanation, start_ns=int(hits[0]["lo"]),
        end_ns=int(hits[-1]["compute_start_ns"]), evidence=_plain(evidence),
    )]


# ------------------------------------------------------------------------------------------
# copy-kernels-block-overlap


def detect_copy_kernels(view: _RankView) -> list[Finding]:
    """Copy kernels next to collectives, on a comm or compute stream, that nothing hides.

    Silent on: copies hidden under compute, copies far from collectives (optimizer, data),
    copies on a side stream of their own, copies small against the exposed communication.
    """
    p, t = view.params, view.trace
    analysed = view.in_windows()
    findings_ev = []
    for d in view.devices():
        on = analysed & (view.device == d)
        cm, cp, cc = on & view.comm, on & view.compute, on & view.copy
        if not cm.any() or not cc.any():
            continue
        busy_streams = np.unique(view.stream[cm | cp])
        cc &= np.isin(view.stream, busy_streams)
        ms, me = iv.union(view.s[cm], view.e[cm])
        near_s, near_e = iv.union(ms - p.copy_adjacent_ns, me + p.copy_adjacent_ns)
        k = np.searchsorted(near_s, view.e, side="left") - 1  # last dilated comm interval starting before end
        kc = np.clip(k, 0, max(near_s.size - 1, 0))
        adjacent = cc & (k >= 0) & (near_e[kc] > view.s)
        if not adjacent.any():
            continue
        comp = iv.union(view.s[cp], view.e[cp])
        copies = iv.union(view.s[adjacent], view.e[adjacent])
        exposed_copy = iv.length(iv.difference(copies, comp))
        exposed_comm = iv.length(iv.difference((ms, me), comp))
        window = exposed_copy + exposed_comm
        share = exposed_copy / window if window else 0.0
        if share < p.copy_min_share or exposed_copy < p.copy_min_span_share * view.span_ns():
            continue
        labels = _per_name(view, adjacent, _copy_label(p.copy_kernel_pattern))
        durs = pd.Series(view.e[adjacent] - view.s[adjacent])
        top = durs.groupby(labels).agg(["size", "sum"]).sort_values("sum", ascending=False).head(5)
        findings_ev.append({
            "device": d, "n_copies": int(adjacent.sum()), "copy_ns": iv.length(copies),
            "exposed_copy_ns": exposed_copy, "exposed_comm_ns": exposed_comm, "share_of_exposed_window": share,
            "streams": sorted(np.unique(view.stream[adjacent]).tolist()),
            "top_copies": [{"copy": str(n), "n": int(r["size"]), "ns": int(r["sum"])} for n, r in top.iterrows()],
            "start_ns": int(view.s[adjacent].min()), "end_ns": int(view.e[adjacent].max()),
        })
    out = []
    for ev in findings_ev:
        short = ev["top_copies"][0]["copy"]
        title = (f"rank {t.rank}: copy kernels next to collectives take {ev['share_of_exposed_window']:.0%} of the "
                 f"exposed communication window ({_ms(ev['exposed_copy_ns'])})")
        explanation = (
            f"{ev['n_copies']} copy kernels (mostly {short}) run within {_us(p.copy_adjacent_ns)} of collectives "
            f"on stream(s) {', '.join(map(str, ev['streams']))} and nothing runs under {_ms(ev['exposed_copy_ns'])} "
            f"of them: packing and unpacking sits in the collective's critical path, lengthening the time the "
            f"communication is exposed ({_ms(ev['exposed_comm_ns'])})."
        )
        start, end = ev.pop("start_ns"), ev.pop("end_ns")
        out.append(Finding(id="copy-kernels-block-overlap", severity=_severity(ev["exposed_copy_ns"],
                                                                                 view.span_ns(), p),
                           ranks=[t.rank], title=title, explanation=explanation, start_ns=start, end_ns=end,
                           evidence=_plain(ev)))
    return out


# ------------------------------------------------------------------------------------------
# launch-bound-gaps


def launch_bound_gaps(view: _RankView, syncs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Idle gaps (per device) whose next activity was launched only after the gap began.

    Gaps during which a blocking host sync that caused GPU idle returned are left out:
    host-blocking-sync owns them. A sync that found the GPU already drained claimed nothing
    (syncs.blocking_syncs charges it no idle): the gap after it stays a launch gap.
    Columns: device, start_ns, end_ns, gap_ns, next_launch_ns, next_name.
    """
    p, t = view.params, view.trace
    cols = ["device", "start_ns", "end_ns", "gap_ns", "next_launch_ns", "next_name"]
    launch = launch_times(t)
    lo, hi = view.lo, view.hi
    syncs = blocking_syncs(t, p.sync) if syncs is None else syncs
    parts = []
    for d in view.devices():
        on = (view.device == d) & view.in_range(lo, hi) & (view.e > view.s)
        gs, ge = iv.gaps(view.s[on], view.e[on])
        big = (ge - gs) >= p.launch_min_gap_ns
        gs, ge = gs[big], ge[big]
        if gs.size == 0:
            continue
        # the activities that end each gap: those starting exactly at its end; earliest launch wins
        idx = np.flatnonzero(on)
        starts = view.s[idx]
        order = np.lexsort((np.where(launch[idx] >= 0, launch[idx], np.iinfo(np.int64).max), starts))
        starts_o, idx_o = starts[order], idx[order]
        j = np.searchsorted(starts_o, ge, side="left")
        nxt = idx_o[np.clip(j, 0, idx_o.size - 1)]
        nl = launch[nxt]
        bound = (nl >= 0) & (nl >= gs)
        # inside an analysed window (steps not selected leave holes between windows)
        wl = np.sort(view.windows["lo"].to_numpy(np.int64))
        wh = view.windows["hi"].to_numpy(np.int64)[np.argsort(view.windows["lo"].to_numpy(np.int64), kind="stable")]
        k = np.searchsorted(wl, gs, side="right") - 1
        bound &= (k >= 0) & (ge <= wh[np.clip(k, 0, wl.size - 1)])
        if not syncs.empty:
            claimed = (syncs["device"] == d) & (syncs["gpu_idle_ns"] > 0)
            se = np.sort(syncs.loc[claimed, "end_ns"].to_numpy(np.int64))
            has_sync = np.searchsorted(se, ge, side="right") > np.searchsorted(se, gs, side="left")
            bound &= ~has_sync
        parts.append(pd.DataFrame({"device": d, "start_ns": gs[bound], "end_ns": ge[bound],
                                   "gap_ns": (ge - gs)[bound], "next_launch_ns": nl[bound],
                                   "next_name": _per_name(view, nxt[bound], normalize_kernel_name)}))
    if not parts:
        return pd.DataFrame({c: [] for c in cols})
    return pd.concat(parts, ignore_index=True)[cols]


def detect_launch_bound(view: _RankView, syncs: pd.DataFrame | None = None) -> list[Finding]:
    """GPU idle gaps where the next kernel was launched only after the previous one ended.

    Silent on: gaps whose next kernel was already queued (the GPU waited on a dependency, not on
    the host), short gaps, few gaps, gaps a host sync explains, traces without launch records.
    """
    p, t = view.params, view.trace
    if not view.comm.any():
        return []  # no communication: no overlap for the gaps to cost
    gaps = launch_bound_gaps(view, syncs)
    span = view.span_ns()
    total = int(gaps["gap_ns"].sum()) if not gaps.empty else 0
    if len(gaps) < p.launch_min_gaps or span <= 0 or total < p.launch_min_share * span:
        return []
    biggest = gaps.sort_values("gap_ns", ascending=False).head(5)
    nxt = gaps.groupby("next_name")["gap_ns"].agg(["size", "sum"]).sort_values("sum", ascending=False).head(5)
    evidence = {
        "n_gaps": int(len(gaps)),
        "gap_ns_total": total,
        "gap_ns_median": float(gaps["gap_ns"].median()),
        "share_of_span": total / span,
        "largest": [{"start_ns": int(r.start_ns), "gap_ns": int(r.gap_ns), "next": str(r.next_name)}
                    for r in biggest.itertuples(index=False)],
        "next_kernels": [{"name": str(n), "n": int(r["size"]), "gap_ns": int(r["sum"])}
                         for n, r in nxt.iterrows()],
    }
    title = f"rank {t.rank}: {len(gaps)} launch-bound GPU gaps, {_ms(total)} idle ({total / span:.0%} of the span)"
    explanation = (
        f"In {len(gaps)} gaps of at least {_us(p.launch_min_gap_ns)} (median {_us(evidence['gap_ns_median'])}) the "
        f"host launched the next kernel only after the previous one had finished: the GPU ran out of queued work "
        f"and waited for the CPU. Communication cannot hide behind compute that is not there yet."
    )
    return [Finding(id="launch-bound-gaps", severity=_severity(total, span, p), ranks=[t.rank], title=title,
                    explanation=explanation, start_ns=int(gaps["start_ns"].min()), end_ns=int(gaps["end_ns"].max()),
                    evidence=_plain(evidence))]


# ------------------------------------------------------------------------------------------
# comm-slowed-by-overlap


def _size_key(gpu: pd.DataFrame) -> np.ndarray:
    n = gpu["msg_nelems"].to_numpy(np.int64)
    b = gpu["bytes"].to_numpy(np.int64)
    return np.where(n >= 0, n, np.where(b >= 0, b, -1))


def transfer_starts(traces: TraceSet, params: FindingParams) -> dict[int, np.ndarray]:
    """Per rank, per GPU row: when the collective could start moving data (its last rank's start).

    Collectives are matched as the n-th kernel of one kind (process group, collective, size) on
    every rank; a kind whose counts differ across ranks keeps its own starts. Only used when the
    matched collectives end together (median skew <= slow_max_end_skew_ns), i.e. the ranks share
    a clock; otherwise every rank keeps its own starts.
    """
    out = {r: traces.ranks[r].gpu["start_ns"].to_numpy(np.int64).copy() for r in traces.rank_ids()}
    if len(traces) < 2 or not params.slow_use_transfer_time:
        return out
    frames = []
    for r in traces.rank_ids():
        g = traces.ranks[r].gpu
        cm = (g["category"] == "comm").to_numpy() & (g["kind"] == "kernel").to_numpy()
        names = traces.ranks[r].names_of(g["name_id"].to_numpy()[cm])
        coll = g["coll_name"].to_numpy(dtype=object)[cm]
        f = pd.DataFrame({"rank": r, "row": np.flatnonzero(cm), "s": g["start_ns"].to_numpy()[cm],
                          "e": g["end_ns"].to_numpy()[cm], "pg": g["pg"].to_numpy(dtype=object)[cm],
                          "kind": np.where(coll != "", coll, names), "size": _size_key(g)[cm]})
        f = f.sort_values("s", kind="stable")
        f["n"] = f.groupby(["pg", "kind", "size"]).cumcount()
        frames.append(f)
    allf = pd.concat(frames, ignore_index=True)
    counts = allf.groupby(["pg", "kind", "size", "rank"]).size().unstack("rank")
    full = counts.notna().all(axis=1) & (counts.nunique(axis=1) == 1)
    good = counts[full].reset_index()[["pg", "kind", "size"]]
    m = allf.merge(good, on=["pg", "kind", "size"])
    if m.empty:
        return out
    key = ["pg", "kind", "size", "n"]
    arrival = m.groupby(key)["s"].transform("max")
    end_skew = m.groupby(key)["e"].transform("max") - m.groupby(key)["e"].transform("min")
    if float(end_skew.median()) > params.slow_max_end_skew_ns:
        return out
    for r, part in m.assign(arrival=arrival).groupby("rank"):
        rows = part["row"].to_numpy()
        out[int(r)][rows] = np.minimum(part["arrival"].to_numpy(np.int64), traces.ranks[int(r)].gpu["end_ns"]
                                       .to_numpy(np.int64)[rows])
    return out


def comm_overlap_comparison(view: _RankView, eff_start: np.ndarray | None = None) -> pd.DataFrame:
    """Per collective kind and size: samples and median duration alone vs overlapped with compute.

    Columns: collective, size, n_alone, n_overlapped, median_alone_ns, median_overlapped_ns,
    slowdown (overlapped / alone - 1; NaN without both sides).
    """
    p = view.params
    cols = ["collective", "size", "n_alone", "n_overlapped", "median_alone_ns", "median_overlapped_ns", "slowdown"]
    g = view.trace.gpu
    cm = view.comm & (g["kind"] == "kernel").to_numpy() & view.in_windows()
    if not cm.any():
        return pd.DataFrame({c: [] for c in cols})
    s0 = view.s if eff_start is None else eff_start
    rows = np.flatnonzero(cm)
    s, e = np.minimum(s0[rows], view.e[rows]), view.e[rows]
    dur = e - s
    frac = np.zeros(rows.size)
    for d in view.devices():
        on = view.device[rows] == d
        cp = view.compute & (view.device == d)
        ps, pe = iv.union(view.s[cp], view.e[cp])
        covered = busy_before(ps, pe, e[on]) - busy_before(ps, pe, s[on])
        frac[on] = np.where(dur[on] > 0, covered / np.maximum(dur[on], 1), 0.0)
    df = pd.DataFrame({"collective": comm_kind(view)[rows], "size": _size_key(g)[rows], "dur": dur,
                       "alone": frac <= p.slow_alone_max_fraction,
                       "over": frac >= p.slow_overlapped_min_fraction})
    grp = df.groupby(["collective", "size"], sort=True)
    res = pd.DataFrame({
        "n_alone": grp["alone"].sum(), "n_overlapped": grp["over"].sum(),
        "median_alone_ns": df[df["alone"]].groupby(["collective", "size"])["dur"].median(),
        "median_overlapped_ns": df[df["over"]].groupby(["collective", "size"])["dur"].median(),
    }).reset_index()
    res["slowdown"] = res["median_overlapped_ns"] / res["median_alone_ns"] - 1.0
    return res[cols]


def detect_comm_slowed(view: _RankView, eff_start: np.ndarray | None = None) -> list[Finding]:
    """The same collective (kind and size) runs markedly slower overlapped with compute than alone.

    Silent on: equal durations, too few samples on either side, collectives never seen alone.
    """
    p, t = view.params, view.trace
    cmp_ = comm_overlap_comparison(view, eff_start)
    if cmp_.empty:
        return []
    enough = ((cmp_["n_alone"] >= p.slow_min_samples) & (cmp_["n_overlapped"] >= p.slow_min_samples)
              & (cmp_["size"] >= 0))
    slow = cmp_[enough & (cmp_["slowdown"] >= p.slow_min_slowdown)]
    if slow.empty:
        return []
    worst = slow.sort_values("slowdown", ascending=False).iloc[0]
    cost = float(((slow["median_overlapped_ns"] - slow["median_alone_ns"]) * slow["n_overlapped"]).sum())
    evidence = {
        "collectives": [{k: _plain(v) for k, v in r.items()} for r in slow.to_dict(orient="records")],
        "compared": [{k: _plain(v) for k, v in r.items()} for r in cmp_[enough].to_dict(orient="records")],
        "extra_comm_ns_estimate": cost,
        "measured_from": "last rank's arrival" if eff_start is not None else "kernel start",
    }
    size_txt = f" of size {int(worst['size'])}" if worst["size"] >= 0 else ""
    title = (f"rank {t.rank}: {worst['collective']}{size_txt} runs {worst['slowdown']:.0%} slower overlapped with "
             f"compute ({_us(worst['median_overlapped_ns'])} vs {_us(worst['median_alone_ns'])} alone)")
    explanation = (
        f"The same collective, with the same size, takes {_us(worst['median_overlapped_ns'])} (median of "
        f"{int(worst['n_overlapped'])}) while compute runs beside it and {_us(worst['median_alone_ns'])} (median of "
        f"{int(worst['n_alone'])}) alone: communication and compute contend for SMs and memory bandwidth, so "
        f"part of what overlap hides is paid back as slower communication (about {_ms(cost)} here)."
    )
    if cost >= p.critical_share * view.span_ns():
        sev = Severity.critical
    elif float(worst["slowdown"]) >= p.slow_warning_slowdown:
        sev = Severity.warning
    else:
        sev = Severity.info
    return [Finding(id="comm-slowed-by-overlap", severity=sev, ranks=[t.rank], title=title, explanation=explanation,
                    start_ns=view.lo, end_ns=view.hi, evidence=_plain(evidence))]


# ------------------------------------------------------------------------------------------
# comm-starved-by-compute


def _running_max_before(starts: np.ndarray, ends: np.ndarray, at: np.ndarray, *, inclusive: bool
                        ) -> tuple[np.ndarray, np.ndarray]:
    """For each time in `at`: the latest end among rows starting before it (at or before it when
    inclusive), and that row's position in `starts` (-1 when none). `starts` must be sorted."""
    if starts.size == 0:
        return np.full(at.size, -1, dtype=np.int64), np.full(at.size, -1, dtype=np.int64)
    run_max = np.maximum.accumulate(ends)
    arg = np.maximum.accumulate(np.where(ends == run_max, np.arange(ends.size), 0))
    pos = np.searchsorted(starts, at, side="right" if inclusive else "left") - 1
    found = pos >= 0
    pos_c = np.clip(pos, 0, None)
    return np.where(found, run_max[pos_c], -1), np.where(found, arg[pos_c], -1)


def starved_comm_kernels(view: _RankView) -> pd.DataFrame:
    """Communication kernels that waited for a compute kernel's SMs rather than for a dependency.

    A comm kernel could have started once it was launched, its stream's earlier work had ended,
    and whatever it waited on had ended. Event waits are not in the trace, so the last activity
    on the device that ended before its start stands in for them (a lower bound on the wait it
    did not need): *eligible* = max(launch, earlier work on its stream, last end before its
    start). It counts when it started starve_min_delay_ns or more after that, while a compute
    kernel on another stream, started by then (give or take starve_blocker_slack_ns), still ran;
    of those, the one that ran longest past the comm kernel's start is named. Copies (copy
    engine) are left out: they need no SMs. A comm kernel before which nothing recorded on its
    device had ended is left out too: what it waited on may predate the trace (censored). Sorted
    running maxima per stream keep this O(n log n). Columns: device, stream, start_ns, eligible_ns,
    delay_ns, name, blocker, blocker_end_ns.
    """
    p, t = view.params, view.trace
    cols = ["device", "stream", "start_ns", "eligible_ns", "delay_ns", "name", "blocker", "blocker_end_ns"]
    is_kernel = (t.gpu["kind"] == "kernel").to_numpy()
    launch = launch_times(t)
    analysed = view.in_windows()
    rows = []
    for d in view.devices():
        # Candidates come from the analysed windows; what they could have waited on (earlier work,
        # last end, blockers) from the whole device, so a window's edge hides no dependency.
        idx = np.flatnonzero(view.device == d)
        cand = idx[analysed[idx] & view.comm[idx] & is_kernel[idx] & (launch[idx] >= 0)]
        if cand.size == 0:
            continue
        prev_end = np.full(cand.size, -1, dtype=np.int64)  # end of the earlier work on its stream
        for k in np.unique(view.stream[cand]):
            on_k = idx[view.stream[idx] == k]
            on_k = on_k[np.argsort(view.s[on_k], kind="stable")]
            here = view.stream[cand] == k
            prev_end[here] = _running_max_before(view.s[on_k], view.e[on_k], view.s[cand[here]], inclusive=False)[0]
        ends = np.sort(view.e[idx])
        before = np.searchsorted(ends, view.s[cand], side="left")
        last_end = np.where(before > 0, ends[np.clip(before - 1, 0, None)], -1)
        eligible = np.maximum.reduce([launch[cand], prev_end, last_end])
        delay = view.s[cand] - eligible
        # Nothing recorded on the device ended before it: what it waited on may predate the trace.
        keep = (delay >= p.starve_min_delay_ns) & (last_end >= 0)
        cand, eligible, delay = cand[keep], eligible[keep], delay[keep]
        comp = idx[view.compute[idx]]
        for k in np.unique(view.stream[cand]):
            other = comp[view.stream[comp] != k]
            other = other[np.argsort(view.s[other], kind="stable")]
            here = np.flatnonzero(view.stream[cand] == k)
            latest_end, at = _running_max_before(view.s[other], view.e[other],
                                                 eligible[here] + p.starve_blocker_slack_ns, inclusive=True)
            for j, end, a in zip(here, latest_end, at, strict=True):
                i = cand[j]
                if end <= view.s[i]:
                    continue  # nothing on another stream was still running when it started
                blocker = other[a]
                rows.append({"device": d, "stream": int(view.stream[i]), "start_ns": int(view.s[i]),
                             "eligible_ns": int(eligible[j]), "delay_ns": int(delay[j]),
                             "name": normalize_kernel_name(str(view.names[i])),
                             "blocker": normalize_kernel_name(str(view.names[blocker])),
                             "blocker_end_ns": int(view.e[blocker])})
    return pd.DataFrame(rows, columns=cols).sort_values(["device", "start_ns"], ignore_index=True)


def detect_comm_starved(view: _RankView) -> list[Finding]:
    """Comm kernels dispatched only at the tail of a compute kernel that held every SM.

    Silent on: delays a dependency can explain (something else ended just before the start),
    copies, comm kernels without launch records, and small totals.
    """
    p, t = view.params, view.trace
    starved = starved_comm_kernels(view)
    total = int(starved["delay_ns"].sum()) if not starved.empty else 0
    if starved.empty or total < p.starve_min_total_ns:
        return []
    span = view.span_ns()
    worst = starved.sort_values("delay_ns", ascending=False).head(5)
    blockers = starved.groupby("blocker")["delay_ns"].agg(["size", "sum"]).sort_values("sum", ascending=False)
    top = str(blockers.index[0])
    evidence = {
        "n_kernels": int(len(starved)),
        "delay_ns_total": total,
        "delay_ns_median": float(starved["delay_ns"].median()),
        "blockers": [{"name": str(n), "n": int(r["size"]), "delay_ns": int(r["sum"])}
                     for n, r in blockers.head(3).iterrows()],
        "largest": [{"name": str(r.name), "stream": int(r.stream), "start_ns": int(r.start_ns),
                     "delay_ns": int(r.delay_ns), "started_before_blocker_end_ns": int(r.blocker_end_ns - r.start_ns)}
                    for r in worst.itertuples(index=False)],
    }
    w = worst.iloc[0]
    title = (f"rank {t.rank}: {len(starved)} comm kernel{'s' if len(starved) > 1 else ''} waited {_ms(total)} "
             f"for SMs held by {top}")
    explanation = (
        f"{w['name']} on stream {int(w['stream'])} was eligible (launched, its stream idle, and nothing that ended "
        f"later on the GPU for it to wait on) {_us(w['delay_ns'])} before "
        f"it started, and started {_us(w['blocker_end_ns'] - w['start_ns'])} before {w['blocker']} ended: it was "
        f"dispatched only when that kernel's CTAs began to retire. A kernel that fills every SM keeps any kernel "
        f"queued after it waiting, whatever the stream priority; the communication behind it starts late and its "
        f"peers wait for it."
    )
    return [Finding(id="comm-starved-by-compute", severity=_severity(total, span, p), ranks=[t.rank], title=title,
                    explanation=explanation, start_ns=int(starved["eligible_ns"].min()),
                    end_ns=int(starved["start_ns"].max()), evidence=_plain(evidence))]


# ------------------------------------------------------------------------------------------
# The engine

Detector = Callable[..., list[Finding]]


def detect_rank(trace: RankTrace, metrics: RankMetrics | None = None, params: FindingParams | None = None,
                eff_start: np.ndarray | None = None, syncs: pd.DataFrame | None = None) -> list[Finding]:
    """Every per-rank detector on one rank."""
    params = params or FindingParams()
    view = _RankView(trace, params, windows_of(trace, metrics, params.step_pattern))
    if trace.gpu.empty or view.windows.empty:
        return []
    syncs = blocking_syncs(trace, params.sync) if syncs is None else syncs
    out: list[Finding] = []
    out += detect_host_blocking_sync(view, syncs)
    out += detect_serialized_streams(view, syncs)
    out += detect_front_loaded(view)
    out += detect_copy_kernels(view)
    out += detect_launch_bound(view, syncs)
    out += detect_comm_slowed(view, eff_start)
    out += detect_comm_starved(view)
    return out


def detect_findings(traces: TraceSet, metrics: dict[int, RankMetrics] | None = None,
                    params: FindingParams | None = None, extra: list[Finding] | None = None,
                    syncs: dict[int, pd.DataFrame] | None = None) -> list[Finding]:
    """All findings of a trace set, most severe first.

    metrics: the RankMetrics `analyze` computed (their iteration windows honour --steps);
    extra: findings from other analyses (crossrank: late-peer, cross-rank-order-mismatch);
    syncs: blocking_syncs per rank when already computed (saves recomputing them).
    """
    params = params or FindingParams()
    eff = transfer_starts(traces, params)
    # the clocks were shared and collectives matched when some rank's starts moved to an arrival
    matched = any(not np.array_equal(eff[r], traces.ranks[r].gpu["start_ns"].to_numpy()) for r in eff)
    out: list[Finding] = []
    for r in traces.rank_ids():
        t = traces.ranks[r]
        out += detect_rank(t, (metrics or {}).get(r), params, eff[r] if matched else None, (syncs or {}).get(r))
    out += list(extra or [])
    return sort_findings(out)


def trace_set_syncs(traces: TraceSet, params: SyncParams | None = None) -> pd.DataFrame:
    """blocking_syncs of every rank in one frame (rank column first)."""
    from .syncs import empty_syncs

    frames = [blocking_syncs(traces.ranks[r], params) for r in traces.rank_ids()]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else empty_syncs()


def findings_present(findings: list[Finding], ids: list[str]) -> list[str]:
    """The ids among `ids` that some finding has (for --fail-on); unknown ids raise ValueError."""
    from .finding import CATALOGUE

    unknown = [i for i in ids if i not in CATALOGUE]
    if unknown:
        raise ValueError(f"unknown finding id(s): {', '.join(unknown)} (known: {', '.join(CATALOGUE)})")
    have = {f.id for f in findings}
    return [i for i in ids if i in have]
