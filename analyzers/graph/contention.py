"""Contention: an activity's duration depends on what runs beside it on its GPU.

A communication kernel that shares the GPU with compute gets fewer SMs and less memory bandwidth,
and a compute kernel beside communication loses some of both; a fix that changes which activities
run together changes their durations. The model, per rank, two classes (communication, compute):

    duration = alone x (1 + s x f)

where f is the share of the activity's time spent beside the other class (a communication
kernel: its transfer window, the last ``dur`` ns before its end; a compute kernel: its whole
span, beside any part of a communication kernel, whose SMs are held while it waits too) and s
the activity's *slowdown*, estimated from the trace being replayed, never from another run:

- each instance's reference (its duration alone): the median of its *call site*'s instances with
  f < ``F_ALONE``, a call site being the k-th instance of its kernel name in its step on its rank
  (the same operation on the same shapes in every iteration; one name often runs many shapes);
  where its call site never ran alone, or the rank has no steps, the median of its (rank, name)'s
  alone instances, if there are ``MIN_EACH`` of them and they do the same work (p90 within
  ``SAME_WORK`` of p10);
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


def overlap_shares(sg: SetGraph, start: np.ndarray, end: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Per node: the share of its time beside the other class on its rank (0 for copies and others).

    A communication node's time is its transfer window [end - dur, end]; a compute node's its span."""
    f = np.zeros(sg.n, dtype=np.float64)
    comm, comp = sg.cat == COMM, sg.cat == COMPUTE
    lo = np.where(comm, np.maximum(end - dur, start), start)
    for r in sg.ranks:
        b, n = sg.base[r], sg.graphs[r].n
        sl = slice(b, b + n)
        for mine, other in ((comm[sl], comp[sl]), (comp[sl], comm[sl])):
            rows = np.flatnonzero(mine) + b
            orows = np.flatnonzero(other) + b
            if not len(rows) or not len(orows):
                continue
            us, ue = iv.union(start[orows], end[orows])
            s, e = lo[rows], end[rows]
            span = e - s
            ov = _covered_before(us, ue, e) - _covered_before(us, ue, s)
            f[rows] = np.where(span > 0, ov / np.maximum(span, 1), 0.0)
    return f


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


def _class_slowdowns(gid: np.ndarray, nid: np.ndarray, site: np.ndarray, repeated: np.ndarray, fr: np.ndarray,
                     d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per node of one class: its slowdown and the level it came from (0 kernel, 1 kernel name, 2 class, 3 none)."""
    alone = fr < F_ALONE
    out = np.zeros(len(gid), dtype=np.float64)
    level = np.full(len(gid), 3, dtype=np.int8)
    # the reference of each instance: its call site's alone median (one alone instance of a repeated call site
    # is enough: the same work in another iteration), else its (rank, name)'s, where that has MIN_EACH alone
    # instances that do the same work (within SAME_WORK of each other: one name may run many shapes)
    a = pd.DataFrame({"g": site[alone], "d": d[alone]}).groupby("g")["d"].median()
    base = np.full(len(site), np.nan)
    base[repeated] = pd.Series(site[repeated]).map(a).to_numpy(np.float64)
    ga = pd.DataFrame({"g": gid[alone], "d": d[alone]}).groupby("g")["d"]
    q = pd.DataFrame({"m": ga.median(), "n": ga.size(), "lo": ga.quantile(0.1), "hi": ga.quantile(0.9)})
    q = q[(q["n"] >= MIN_EACH) & (q["hi"] <= (1 + SAME_WORK) * q["lo"])]
    by_name = pd.Series(gid).map(q["m"]).to_numpy(np.float64)
    base = np.where(np.isfinite(base), base, by_name)
    fit = ~alone & np.isfinite(base) & (base > 0)
    x, y = fr[fit], d[fit] / base[fit] - 1.0
    pooled = _slopes(np.zeros(len(x), dtype=np.int64), x, y)
    if len(pooled):
        out[:], level[:] = float(pooled.iloc[0]), 2
    for lv, key, key_fit in ((1, nid, nid[fit]), (0, gid, gid[fit])):  # the finer level wins
        v = pd.Series(key).map(_slopes(key_fit, x, y)).to_numpy(np.float64)
        hit = np.isfinite(v)
        out[hit], level[hit] = v[hit], lv
    return out, level


LEVELS = ("kernel", "kernel name", "class", "none")


def estimate(sg: SetGraph) -> ContentionModel:
    """Each node's slowdown from the measured trace (module docstring); cached on the graph."""
    cached = getattr(sg, "_contention", None)
    if cached is not None:
        return cached
    dur = baseline_inputs(sg).dur
    f = overlap_shares(sg, sg.start, sg.end, dur)
    s = np.zeros(sg.n, dtype=np.float64)
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
            s[rows], level = _class_slowdowns(gid, nid, site, repeated, f[rows], dur[rows].astype(np.float64))
        for lv, name in enumerate(LEVELS):
            k = int((level == lv).sum())
            if k:
                sources[f"{label}: {name}"] = k
        if (level == 3).any():
            notes.append(f"contention: no {label} kernel ran both alone and beside {other} often enough to "
                         f"estimate how much it slows there; {label} durations are kept whatever runs beside them")
    model = ContentionModel(slowdown=s, measured_f=f, sources=sources, notes=notes)
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
        f = overlap_shares(sg, rp.start, rp.end, cur.dur)
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
