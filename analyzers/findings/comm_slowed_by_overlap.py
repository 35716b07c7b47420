"""comm-slowed-by-overlap: the same collective runs slower overlapped than alone."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzers.findings.finding import CatalogueEntry, Finding, Severity
from analyzers.findings.view import (
    RankContext,
    RankView,
    comm_kind_numbered,
    fmt_ms,
    fmt_us,
    plain,
)
from analyzers.syncs.device_busy import busy_before
from analyzers.timeline import intervals as iv
from analyzers.timeline.model import TraceSet


@dataclass(frozen=True)
class Params:
    """Thresholds of comm-slowed-by-overlap (fields of FindingParams)."""

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


ENTRY = CatalogueEntry(
    id='comm-slowed-by-overlap',
    detects=('communication kernels run markedly slower while overlapped than alone (SM / memory '
                'contention)'),
    fix='copy-engine or fewer-CTA communication, SM carve-out',
    summary='the same collective runs markedly slower overlapped than alone',
    summary_fix='copy-engine / fewer-CTA communication, SM carve-out',
    look_alikes=('equal durations, too few samples on either side, other sizes, collectives never seen'
                    ' alone or never overlapped, waiting for a late peer (measured from the last arrival)'),
)


def _size_key(gpu: pd.DataFrame) -> np.ndarray:
    n = gpu["msg_nelems"].to_numpy(np.int64)
    b = gpu["bytes"].to_numpy(np.int64)
    return np.where(n >= 0, n, np.where(b >= 0, b, -1))


class RankStarts(Mapping[int, np.ndarray]):
    """Per rank, per GPU row, the effective start: made on access from the rank's table and the rows that
    moved, which are all it holds (every rank's full start column, at many ranks, would not be small)."""

    def __init__(self, traces: TraceSet, moved: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        self.traces, self.moved = traces, moved

    def __getitem__(self, r: int) -> np.ndarray:
        out = self.traces.ranks[r].gpu["start_ns"].to_numpy(np.int64).copy()
        if r in self.moved:
            rows, starts = self.moved[r]
            out[rows] = starts
        return out

    def __iter__(self) -> Iterator[int]:
        return iter(self.traces.rank_ids())

    def __len__(self) -> int:
        return len(self.traces.ranks)


def transfer_starts(traces: TraceSet, params: Params) -> RankStarts:
    """Per rank, per GPU row: when the collective could start moving data (its last rank's start).

    Collectives are matched as the n-th kernel of one kind (process group, collective, size) on
    every rank; a kind whose counts differ across ranks keeps its own starts. Only used when the
    matched collectives end together (median skew <= slow_max_end_skew_ns), i.e. the ranks share
    a clock; otherwise every rank keeps its own starts. Works on integer codes (one sort, then
    per-group reductions), not pandas group-bys: it runs on the caller after the parallel stage.
    """
    ids = traces.rank_ids()
    out = RankStarts(traces, {})
    if len(traces) < 2 or not params.slow_use_transfer_time:
        return out
    parts = [_comm_kernels(traces, r) for r in ids]
    rank_pos = np.concatenate([np.full(len(p["row"]), i, dtype=np.int64) for i, p in enumerate(parts)])
    row, s, e = (np.concatenate([p[c] for p in parts]) for c in ("row", "s", "e"))
    key = _joint_codes([np.concatenate([p[c] for p in parts]) for c in ("pg", "kind", "size")])
    n_keys, n_ranks = int(key.max(initial=-1)) + 1, len(ids)
    # n: the kernel's number among its rank's kernels of its kind, in start order (rows of a rank
    # are in start order already; a stable sort by (rank, kind) keeps that order within each)
    order = np.argsort(rank_pos * n_keys + key, kind="stable")
    group = (rank_pos * n_keys + key)[order]
    first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    n = np.empty(len(key), dtype=np.int64)
    n[order] = np.arange(len(order)) - np.repeat(first, np.diff(np.r_[first, len(order)]))
    counts = np.bincount(key * n_ranks + rank_pos, minlength=n_keys * n_ranks).reshape(n_keys, n_ranks)
    good = (counts > 0).all(axis=1) & (counts == counts[:, :1]).all(axis=1)
    keep = np.flatnonzero(good[key]) if len(key) else np.zeros(0, dtype=np.int64)
    if not len(keep):
        return out
    # every kept (kind, n) has exactly one kernel per rank
    _, inverse = np.unique(key[keep] * (int(n[keep].max()) + 1) + n[keep], return_inverse=True)
    by_match = np.argsort(inverse, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(inverse[by_match]) != 0])
    arrival = np.maximum.reduceat(s[keep][by_match], starts)
    end_skew = np.maximum.reduceat(e[keep][by_match], starts) - np.minimum.reduceat(e[keep][by_match], starts)
    if float(np.median(end_skew.astype(np.float64))) > params.slow_max_end_skew_ns:
        return out
    moved = np.minimum(arrival[inverse], e[keep])
    for i, r in enumerate(ids):
        mine = rank_pos[keep] == i
        out.moved[r] = (row[keep][mine], moved[mine])
    return out


def _comm_kernels(traces: TraceSet, r: int) -> dict[str, np.ndarray]:
    """A rank's communication kernels in start order: GPU row, start, end, and their kind's parts."""
    g = traces.ranks[r].gpu
    cm = (g["category"] == "comm").to_numpy() & (g["kind"] == "kernel").to_numpy()
    coll = g["coll_name"].to_numpy(dtype=object)[cm]
    names = traces.ranks[r].names_of(g["name_id"].to_numpy()[cm])
    cols = {"row": np.flatnonzero(cm), "s": g["start_ns"].to_numpy(np.int64)[cm],
            "e": g["end_ns"].to_numpy(np.int64)[cm], "pg": g["pg"].to_numpy(dtype=object)[cm],
            "kind": np.where(coll != "", coll, names).astype(object), "size": _size_key(g)[cm]}
    order = np.argsort(cols["s"], kind="stable")
    return {c: v[order] for c, v in cols.items()}


def _joint_codes(columns: list[np.ndarray]) -> np.ndarray:
    """One integer per distinct combination of the columns' values."""
    codes = np.zeros(len(columns[0]), dtype=np.int64)
    for col in columns:
        c, uniques = pd.factorize(col)
        codes = pd.factorize(codes * (len(uniques) + 1) + c)[0].astype(np.int64)  # compact again: no overflow
    return codes


def comm_overlap_comparison(view: RankView, eff_start: np.ndarray | None = None) -> pd.DataFrame:
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
    alone, over = frac <= p.slow_alone_max_fraction, frac >= p.slow_overlapped_min_fraction
    # Groups of (collective, size) in sorted order, as a sorted group-by makes them; a row without a
    # collective name belongs to none.
    code, names = comm_kind_numbered(view)
    code = code[rows]
    ok = np.flatnonzero(code >= 0)
    ok = ok[np.lexsort((_size_key(g)[rows][ok], code[ok]))]
    code, size, dur, alone, over = code[ok], _size_key(g)[rows][ok], dur[ok], alone[ok], over[ok]
    heads = np.flatnonzero(np.r_[True, (code[1:] != code[:-1]) | (size[1:] != size[:-1])]) if ok.size else ok
    bounds = np.r_[heads, ok.size]

    def medians(side: np.ndarray) -> np.ndarray:
        """Median duration of each group's rows on that side (NaN for none), in float64 as pandas has it."""
        return np.array([np.median(dur[a:b][side[a:b]].astype(np.float64)) if side[a:b].any() else np.nan
                         for a, b in zip(bounds[:-1], bounds[1:], strict=True)], dtype=np.float64)

    res = pd.DataFrame({
        "collective": np.asarray(names, dtype=object)[code[heads]], "size": size[heads],
        "n_alone": np.add.reduceat(alone.astype(np.int64), heads) if heads.size else np.zeros(0, dtype=np.int64),
        "n_overlapped": np.add.reduceat(over.astype(np.int64), heads) if heads.size else np.zeros(0, dtype=np.int64),
        "median_alone_ns": medians(alone), "median_overlapped_ns": medians(over),
    })
    res["slowdown"] = res["median_overlapped_ns"] / res["median_alone_ns"] - 1.0
    return res[cols]


def detect_comm_slowed(view: RankView, eff_start: np.ndarray | None = None) -> list[Finding]:
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
        "collectives": [{k: plain(v) for k, v in r.items()} for r in slow.to_dict(orient="records")],
        "compared": [{k: plain(v) for k, v in r.items()} for r in cmp_[enough].to_dict(orient="records")],
        "extra_comm_ns_estimate": cost,
        "measured_from": "last rank's arrival" if eff_start is not None else "kernel start",
    }
    size_txt = f" of size {int(worst['size'])}" if worst["size"] >= 0 else ""
    title = (f"rank {t.rank}: {worst['collective']}{size_txt} runs {worst['slowdown']:.0%} slower overlapped with "
             f"compute ({fmt_us(worst['median_overlapped_ns'])} vs {fmt_us(worst['median_alone_ns'])} alone)")
    explanation = (
        f"The same collective, with the same size, takes {fmt_us(worst['median_overlapped_ns'])} (median of "
        f"{int(worst['n_overlapped'])}) while compute runs beside it and {fmt_us(worst['median_alone_ns'])} (median of "
        f"{int(worst['n_alone'])}) alone: communication and compute contend for SMs and memory bandwidth, so "
        f"part of what overlap hides is paid back as slower communication (about {fmt_ms(cost)} here)."
    )
    if cost >= p.critical_share * view.span_ns():
        sev = Severity.critical
    elif float(worst["slowdown"]) >= p.slow_warning_slowdown:
        sev = Severity.warning
    else:
        sev = Severity.info
    return [Finding(id="comm-slowed-by-overlap", severity=sev, ranks=[t.rank], title=title, explanation=explanation,
                    start_ns=view.lo, end_ns=view.hi, evidence=plain(evidence))]


def detect(view: RankView, context: RankContext) -> list[Finding]:
    """The registry's entry point: detect_comm_slowed with what it needs from the rank's context."""
    return detect_comm_slowed(view, context.eff_start)
