"""Contention: an activity's duration depends on what runs beside it on its GPU.

A communication kernel that shares the GPU with compute gets fewer SMs and less memory bandwidth,
and a compute kernel beside communication loses some of both; a fix that changes which activities
run together changes their durations. The model, per rank, two classes (communication, compute):

    duration = alone x (1 + s x f)

where f is the share of the activity's time beside the other class (a communication kernel: its
transfer window, the last ``dur`` ns before its end; a compute kernel: its whole span beside any part of
a communication kernel, its time beside a kernel that only waits at a join, no transfer beside it,
counting w of itself) and s the activity's *slowdown*, estimated from the trace being replayed, never
from another run:

- each instance's reference (its duration alone): the median of its *call site*'s instances with
  f < ``F_ALONE``, a call site being the k-th instance of its kernel name in its step on its rank
  (the same operation on the same shapes in every iteration; one name often runs many shapes);
  where its call site never ran alone, or the rank has no steps, the median of its (rank, name)'s
  alone instances, if there are ``MIN_EACH`` of them and they do the same work (p90 within
  ``SAME_WORK`` of p10) and the instance could be that work slowed only where beside the other class
  (it took at most their p90 / (1 - f));
- w (compute, per set): a waiting communication kernel holds SMs and polls memory but moves no data;
  the w in [0, 1] whose per-name slopes over f_transfer + w f_wait fit best, where ``MIN_EACH``
  instances ran beside waits and beside transfers (names that did both), else ``WAIT_WEIGHT_FALLBACK``;
- s per (rank, kernel name, class): the least-squares slope, through the origin, of
  duration / reference - 1 over f of its instances with f >= ``F_ALONE`` and a reference (at least
  ``MIN_EACH``); a negative slope counts as 0 (an activity is not taken to speed up beside the
  other class);
- where a kernel name lacks such instances on a rank: the same fit pooled over every rank's
  instances of that name, then over every kernel of its class in the set; where nothing of the
  class ever ran both ways, s = 0 (durations kept) and a note says so.

The replay is iterated: replay, measure each activity's f in the replayed timeline, set its
duration to ``input x (1 + s f') / (1 + s f)`` (f measured in the trace, so an unchanged timeline
keeps its measured durations), replay again, until no duration moves by more than ``TOL_NS``
or ``REL_TOL`` of itself, or until every rank's steps move by no more than that between two rounds
after the second (at most ``MAX_ROUNDS`` replays; a note says when it stopped short). From the
second round on each duration moves halfway to its new value: a kernel that slows out of its
overlap and speeds back into it would otherwise swing between the two.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from analyzers.graph.fixes import ReplayInputs, baseline_inputs
from analyzers.graph.rank_graph import CAT_CODES
from analyzers.graph.replay import Replay, replay
from analyzers.graph.residency import settle_gates
from analyzers.graph.set_graph import SetGraph
from analyzers.graph.steps import rank_steps
from analyzers.timeline import intervals as iv

F_ALONE = 0.05  # an instance with less of its time beside the other class counts as run alone
MIN_EACH = 2  # instances needed both alone and beside the other class for a fit
WAIT_WEIGHT_FALLBACK = 1.0  # compute beside a waiting comm kernel, where the trace cannot say: as beside a transfer
SAME_WORK = 0.25  # alone instances of one name within this of each other (p90 / p10) do the same work
TOL_NS = 1_000  # the replay has converged when no duration moves by more than this ...
REL_TOL = 0.002  # ... or than this share of itself
MAX_ROUNDS = 8  # replays at most (the first included)
COMM, COMPUTE = CAT_CODES["comm"], CAT_CODES["compute"]


@dataclass
class ContentionModel:
    """Per node: its slowdown s (0: none or not estimated) and its measured share f beside the other class."""

    slowdown: np.ndarray  # float64
    measured_f: np.ndarray  # float64
    wait_weight: float = WAIT_WEIGHT_FALLBACK  # a compute kernel's time beside a comm kernel's wait counts this much
    sources: dict[str, int] = field(default_factory=dict)  # how each class's nodes got s: level -> count
    notes: list[str] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return bool((self.slowdown > 0).any())


def _covered_before(us: np.ndarray, ue: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per time t: how much of the merged set (us, ue) lies before t."""
    if not len(us):
        return np.zeros(len(t), dtype=np.int64)
    cum = np.r_[0, np.cumsum(ue - us)]
    k = np.searchsorted(us, t, side="right")  # intervals starting at or before t
    last = np.maximum(k - 1, 0)
    inside = np.where(k > 0, np.clip(t - us[last], 0, ue[last] - us[last]), 0)
    return cum[last] * (k > 0) + inside


def overlap_shares(sg: SetGraph, start: np.ndarray, end: np.ndarray, dur: np.ndarray,
                   wait_weight: float = 1.0) -> np.ndarray:
    """Per node: the share of its time beside the other class on its rank (0 for copies and others).

    A communication node's time is its transfer window [end - dur, end]; a compute node's its span, whose
    time beside a communication kernel's wait (not beside any transfer) counts wait_weight of itself.
    Every rank at once: each rank's times are shifted into a range of their own (rank position x the set's
    time span), so one union and one search serve all ranks and no interval reaches another rank's."""
    f = np.zeros(sg.n, dtype=np.float64)
    comm, comp = sg.cat == COMM, sg.cat == COMPUTE
    lo = np.where(comm, np.maximum(end - dur, start), start)
    if not sg.n:
        return f
    t0 = int(min(start.min(), lo.min()))
    span = int(max(end.max(), lo.max())) - t0 + 1
    if span * (len(sg.ranks) + 1) >= 1 << 62:  # the shifted times would leave int64: rank by rank
        return _overlap_shares_by_rank(sg, start, end, lo, wait_weight)
    pos = np.searchsorted(np.asarray(sg.ranks), sg.rank_of)
    shift = pos.astype(np.int64) * span - t0
    s_all, e_all, lo_all = start + shift, end + shift, lo + shift
    for mine, other, is_comp in ((comm, comp, False), (comp, comm, True)):
        _fill_shares(f, np.flatnonzero(mine), np.flatnonzero(other), s_all, e_all, lo_all, is_comp, wait_weight)
    return f


def _overlap_shares_by_rank(sg: SetGraph, start: np.ndarray, end: np.ndarray, lo: np.ndarray,
                            wait_weight: float) -> np.ndarray:
    f = np.zeros(sg.n, dtype=np.float64)
    comm, comp = sg.cat == COMM, sg.cat == COMPUTE
    for r in sg.ranks:
        b, n = sg.base[r], sg.graphs[r].n
        sl = slice(b, b + n)
        for mine, other, is_comp in ((comm[sl], comp[sl], False), (comp[sl], comm[sl], True)):
            _fill_shares(f, np.flatnonzero(mine) + b, np.flatnonzero(other) + b, start, end, lo, is_comp, wait_weight)
    return f


def _fill_shares(f: np.ndarray, rows: np.ndarray, orows: np.ndarray, start: np.ndarray, end: np.ndarray,
                 lo: np.ndarray, is_comp: bool, wait_weight: float) -> None:
    """f[rows]: the share of each row's [lo, end) that the other class's activities (orows) run beside."""
    if not len(rows) or not len(orows):
        return
    s, e = lo[rows], end[rows]
    width = e - s
    ov = _beside(start[orows], end[orows], s, e)
    if is_comp and wait_weight != 1.0:  # beside transfers in full, beside waits only in part
        tr = _beside(lo[orows], end[orows], s, e)
        ov = tr + wait_weight * (ov - tr)
    f[rows] = np.where(width > 0, ov / np.maximum(width, 1), 0.0)


def _beside(os_: np.ndarray, oe: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per interval [s, e): how much of it the union of the intervals (os_, oe) covers."""
    us, ue = iv.union(os_, oe)
    return _covered_before(us, ue, e) - _covered_before(us, ue, s)


def _groups(sg: SetGraph, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per selected node: its (rank, name) group, its name across ranks (by the name's text), its call site
    and whether that is a repeated call site: the k-th instance of its name in its step on its rank (the
    same operation, same shapes, in every iteration), or, without steps, the (rank, name) group itself."""
    names: dict[str, int] = {}
    nid = []
    for r in sg.ranks:
        g = sg.graphs[r]
        codes = np.asarray([names.setdefault(nm, len(names)) for nm in g.names], dtype=np.int64)
        nid.append(codes[g.name_id] if len(codes) else np.zeros(g.n, dtype=np.int64))
    name = np.concatenate(nid)[sel] if nid else np.zeros(0, dtype=np.int64)
    rank_pos = np.searchsorted(np.asarray(sg.ranks), sg.rank_of[sel])
    gid = name * (len(sg.ranks) + 1) + rank_pos
    step = sg.step[sel]
    df = pd.DataFrame({"g": gid, "step": step, "start": sg.start[sel]})
    occ = df.sort_values("start", kind="stable").groupby(["g", "step"]).cumcount().reindex(df.index).to_numpy()
    repeated = step >= 0
    site = pd.factorize(pd.MultiIndex.from_arrays([gid, np.where(repeated, occ, -1)]))[0]
    return gid, name, site.astype(np.int64), repeated


def _slopes(key: np.ndarray, x: np.ndarray, y: np.ndarray) -> pd.Series:
    """Per key: the least-squares slope through the origin of y over x (at least MIN_EACH points; >= 0)."""
    if not len(key):
        return pd.Series(dtype=np.float64)
    uniq, inv = np.unique(key, return_inverse=True)
    xy, xx, n = np.bincount(inv, x * y), np.bincount(inv, x * x), np.bincount(inv)
    ok = (n >= MIN_EACH) & (xx > 0)
    return pd.Series(np.maximum(xy[ok] / np.where(ok, xx, 1.0)[ok], 0.0), index=uniq[ok])


def _references(gid: np.ndarray, site: np.ndarray, repeated: np.ndarray, fr: np.ndarray,
                d: np.ndarray) -> np.ndarray:
    """Per node of one class: its duration alone (module docstring), NaN where the trace does not give it."""
    alone = fr < F_ALONE
    # its call site's alone median (one alone instance of a repeated call site is enough: the same work in
    # another iteration), else its (rank, name)'s, where that has MIN_EACH alone instances that do the same
    # work (within SAME_WORK of each other: one name may run many shapes)
    a = pd.DataFrame({"g": site[alone], "d": d[alone]}).groupby("g")["d"].median()
    base = np.full(len(site), np.nan)
    base[repeated] = pd.Series(site[repeated]).map(a).to_numpy(np.float64)
    ga = pd.DataFrame({"g": gid[alone], "d": d[alone]}).groupby("g")["d"]
    q = pd.DataFrame({"m": ga.median(), "n": ga.size(), "lo": ga.quantile(0.1), "hi": ga.quantile(0.9)})
    q = q[(q["n"] >= MIN_EACH) & (q["hi"] <= (1 + SAME_WORK) * q["lo"])]
    by_name = np.array(pd.Series(gid).map(q["m"]), dtype=np.float64)
    # the name's alone instances need not do this instance's work: an instance that took longer than
    # the slowest of them (their 90th percentile) / (1 - f) would have needed more than that time in the
    # (1 - f) of its span it ran alone, at full speed: other work, no reference
    other_work = (fr < 1.0) & (d * (1.0 - fr) > pd.Series(gid).map(q["hi"]).to_numpy(np.float64))
    by_name[other_work] = np.nan
    return np.where(np.isfinite(base), base, by_name)


def _wait_weight(nid: np.ndarray, ft: np.ndarray, fw: np.ndarray, y: np.ndarray) -> float | None:
    """How much a compute kernel's time beside a waiting communication kernel slows it, relative to its time
    beside a transferring one: the weight w in [0, 1] (steps of 0.01) for which per-name slopes over
    ft + w x fw fit the instances best; None where fewer than MIN_EACH instances ran beside waits, or beside
    transfers, among names that did both."""
    uniq, inv = np.unique(nid, return_inverse=True)
    both = (np.bincount(inv, fw >= F_ALONE) > 0) & (np.bincount(inv, ft >= F_ALONE) > 0)
    inb = both[inv]
    if int((inb & (fw >= F_ALONE)).sum()) < MIN_EACH or int((inb & (ft >= F_ALONE)).sum()) < MIN_EACH:
        return None
    inv, ft, fw, y = np.unique(inv[inb], return_inverse=True)[1], ft[inb], fw[inb], y[inb]
    best, best_err = 1.0, np.inf
    for w in np.linspace(0.0, 1.0, 101):
        x = ft + w * fw
        xy, xx = np.bincount(inv, x * y), np.bincount(inv, x * x)
        slope = np.maximum(xy / np.where(xx > 0, xx, 1.0), 0.0)
        err = float((y * y).sum() - (2 * slope * xy - slope * slope * xx).sum())
        if err < best_err - 1e-12:
            best, best_err = float(w), err
    return best


def _class_slowdowns(gid: np.ndarray, nid: np.ndarray, site: np.ndarray, repeated: np.ndarray, fr: np.ndarray,
                     d: np.ndarray, fw: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """Per node of one class: its slowdown and the level it came from (0 kernel, 1 kernel name, 2 class,
    3 none), and the class's wait weight (1 for communication). fr: each node's share beside any part of the
    other class; fw (compute): the part of it beside communication that only waits."""
    alone = fr < F_ALONE
    out = np.zeros(len(gid), dtype=np.float64)
    level = np.full(len(gid), 3, dtype=np.int8)
    base = _references(gid, site, repeated, fr, d)
    fit = ~alone & np.isfinite(base) & (base > 0)
    y = d[fit] / base[fit] - 1.0
    wait_weight = 1.0
    if fw is not None:
        w = _wait_weight(nid[fit], fr[fit] - fw[fit], fw[fit], y)
        wait_weight = WAIT_WEIGHT_FALLBACK if w is None else w
    x = fr[fit] if fw is None else fr[fit] - (1.0 - wait_weight) * fw[fit]
    pooled = _slopes(np.zeros(len(x), dtype=np.int64), x, y)
    if len(pooled):
        out[:], level[:] = float(pooled.iloc[0]), 2
    for lv, key, key_fit in ((1, nid, nid[fit]), (0, gid, gid[fit])):  # the finer level wins
        v = pd.Series(key).map(_slopes(key_fit, x, y)).to_numpy(np.float64)
        hit = np.isfinite(v)
        out[hit], level[hit] = v[hit], lv
    return out, level, wait_weight


LEVELS = ("kernel", "kernel name", "class", "none")


def estimate(sg: SetGraph) -> ContentionModel:
    """Each node's slowdown from the measured trace (module docstring); cached on the graph."""
    cached = getattr(sg, "_contention", None)
    if cached is not None:
        return cached
    dur = baseline_inputs(sg).dur
    f = overlap_shares(sg, sg.start, sg.end, dur)
    s = np.zeros(sg.n, dtype=np.float64)
    wait_weight = WAIT_WEIGHT_FALLBACK
    sources: dict[str, int] = {}
    notes: list[str] = []
    for cls, label, other in ((COMM, "communication", "compute"), (COMPUTE, "compute", "communication")):
        rows = np.flatnonzero(sg.cat == cls)
        if not len(rows):
            continue
        alone = f[rows] < F_ALONE
        if alone.all() or not alone.any():  # nothing to fit: the common case of traces without overlap
            level = np.full(len(rows), 3, dtype=np.int8)
        else:
            gid, nid, site, repeated = _groups(sg, rows)
            fw = None
            if cls == COMPUTE:  # the part of f beside communication that only waits
                fw = f[rows] - overlap_shares(sg, sg.start, sg.end, dur, wait_weight=0.0)[rows]
            s[rows], level, w = _class_slowdowns(gid, nid, site, repeated, f[rows], dur[rows].astype(np.float64), fw)
            if cls == COMPUTE:
                wait_weight = w
                f[rows] -= (1.0 - w) * fw
        for lv, name in enumerate(LEVELS):
            k = int((level == lv).sum())
            if k:
                sources[f"{label}: {name}"] = k
        if (level == 3).any():
            notes.append(f"contention: no {label} kernel ran both alone and beside {other} often enough to "
                         f"estimate how much it slows there; {label} durations are kept whatever runs beside them")
    model = ContentionModel(slowdown=s, measured_f=f, wait_weight=wait_weight, sources=sources, notes=notes)
    sg._contention = model  # type: ignore[attr-defined]
    return model


@dataclass
class ContendedReplay:
    inputs: ReplayInputs  # the inputs with the converged durations
    replay: Replay
    rounds: int
    converged: bool


def contended_replay(sg: SetGraph, inp: ReplayInputs, order: np.ndarray | None = None) -> ContendedReplay:
    """Replay with durations that follow what runs beside each activity (module docstring)."""
    model = estimate(sg)
    inp, rp, settled = settle_gates(sg, inp, replay(sg, inp, order), order)
    s = model.slowdown
    if not inp.contention:
        s = np.where(sg.cat == COMM, 0.0, s)  # the comm-contention fix: communication at its alone speed
    if not (s > 0).any():
        return ContendedReplay(inp, rp, 1, settled)
    alone = inp.dur / (1.0 + s * model.measured_f)
    sel = s > 0
    cur = inp
    steps = _step_durations(sg, rp)
    for rounds in range(1, MAX_ROUNDS + 1):
        f = overlap_shares(sg, rp.start, rp.end, cur.dur, model.wait_weight)
        new = cur.dur.copy()
        target = alone[sel] * (1.0 + s[sel] * f[sel])
        if rounds > 1:  # halfway: a kernel that slows out of its overlap and speeds back in settles between
            target = 0.5 * (target + cur.dur[sel])
        new[sel] = np.round(target).astype(np.int64)
        if (np.abs(new - cur.dur) <= np.maximum(TOL_NS, REL_TOL * cur.dur)).all():
            return ContendedReplay(cur, rp, rounds, settled)
        if rounds == MAX_ROUNDS:
            break
        nxt = replace(cur, dur=new)
        cur, rp, settled = settle_gates(sg, nxt, replay(sg, nxt, order), order)
        prev_steps, steps = steps, _step_durations(sg, rp)
        if rounds > 1 and len(steps) == len(prev_steps) and (
                np.abs(steps - prev_steps) <= np.maximum(TOL_NS, REL_TOL * prev_steps)).all():
            return ContendedReplay(cur, rp, rounds + 1, settled)  # single kernels may still swing; the steps do not
    return ContendedReplay(cur, rp, MAX_ROUNDS, False)


def _step_durations(sg: SetGraph, rp: Replay) -> np.ndarray:
    return rank_steps(sg, rp.start, rp.end)["dur_ns"].to_numpy(np.int64)
