"""A trace set and its analysis as Chrome-trace tracks (what ui.perfetto.dev opens), as data.

Every rank becomes a process ``rank N``; every (device, stream) a thread; the analysis adds
per-rank tracks: hidden communication (busy(comm) ∩ busy(compute)), exposed communication
(busy(comm) − busy(compute)), peer wait per collective, blocking host syncs, and one marker
per finding. Times are on the cross-rank analysis' common clock (its offsets applied) and
relative to one origin, so the viewer shows every rank on one axis.

Perfetto drops complete events that overlap on one track without nesting, so activities that
overlap on one stream (or on any added track) are split into extra lanes, each a thread of its
own: no event is lost. Serializing to JSON is viz/perfetto_json.py's job.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from analyzers.findings import CROSS_RANK_FINDINGS
from analyzers.report import AnalysisReport
from analyzers.timeline import intervals as iv
from analyzers.timeline.model import TraceSet

# Findings computed on the cross-rank (aligned) clock; the others are on their rank's own clock.
# Taken from the registry, so a new cross-rank finding is placed right without an edit here.
ALIGNED_FINDINGS = frozenset(f.ENTRY.id for f in CROSS_RANK_FINDINGS)

SPAN_COLUMNS = ("pid", "tid", "start_ns", "end_ns", "name", "cat", "args")
GPU_EVENT_COLUMNS = ("pid", "tid", "start_ns", "end_ns", "name", "cat", "kind", "correlation")


@dataclass
class PerfettoData:
    """Everything the JSON holds, in columnar form (times: ns from ``origin_ns``, aligned clock).

    gpu: one row per GPU activity of the input (kernels, copies, sets): pid, tid, start_ns,
    end_ns, name, cat (category), kind, correlation. spans: the analysis tracks, one row per
    interval (SPAN_COLUMNS; args a JSON-able dict). markers: one dict per finding (pid, tid,
    ts_ns, name, args). tracks: pid, tid, name, sort (one row per thread); processes: pid,
    name, sort.
    """

    gpu: pd.DataFrame
    spans: pd.DataFrame
    markers: list[dict[str, Any]]
    tracks: pd.DataFrame
    processes: pd.DataFrame
    origin_ns: int
    offsets_ns: dict[int, int]
    meta: dict[str, Any] = field(default_factory=dict)


def pid_of(rank: int) -> int:
    """Process id of a rank (pid 0 means the idle task to some viewers, so ranks start at 1)."""
    return int(rank) + 1


def split_lanes(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A lane per interval such that no two intervals of one key and lane overlap.

    Keys whose intervals never overlap (every well-formed stream; found vectorized) keep lane
    0. The others are packed greedily in start order, each interval into a lane already free
    (a heap of lane ends), else a new one: as few lanes as their deepest overlap needs.
    """
    n = start.size
    lane = np.zeros(n, dtype=np.int64)
    if n == 0:
        return lane
    order = np.lexsort((end, start, key))
    k, s, e = key[order], start[order], end[order]
    new_key = np.r_[True, k[1:] != k[:-1]]
    dense = np.cumsum(new_key) - 1
    base = s.min()
    stride = np.int64(e.max() - base + 1)
    run_end = np.maximum.accumulate((e - base) + dense * stride) - dense * stride + base
    prev_end = np.r_[np.int64(0), run_end[:-1]]
    clash = ~new_key & (s < prev_end)
    for bad in np.unique(k[clash]):
        lo, hi = np.searchsorted(k, bad, "left"), np.searchsorted(k, bad, "right")
        heap: list[tuple[int, int]] = []
        for i in range(lo, hi):
            if heap and heap[0][0] <= s[i]:
                _, free = heapq.heappop(heap)
            else:
                free = len(heap)
            lane[order[i]] = free
            heapq.heappush(heap, (int(e[i]), free))
    return lane


def aligned_traces(traces: TraceSet, report: AnalysisReport) -> tuple[TraceSet, dict[int, int]]:
    """The trace set on the common clock the cross-rank analysis chose, with its offsets."""
    cross = report.cross_rank
    if cross is not None and cross.clock is not None and cross.clock.applied and cross.aligned is not None:
        return cross.aligned, {r: int(cross.clock.offsets_ns.get(r, 0)) for r in traces.ranks}
    return traces, {r: 0 for r in traces.ranks}


def _spans(pid: int, s: np.ndarray, e: np.ndarray, name: Any, cat: str, args: list | None = None) -> pd.DataFrame:
    n = s.size
    return pd.DataFrame({"pid": np.full(n, pid, dtype=np.int64), "tid": np.zeros(n, dtype=np.int64),
                         "start_ns": np.asarray(s, dtype=np.int64), "end_ns": np.asarray(e, dtype=np.int64),
                         "name": pd.Series(np.full(n, name, dtype=object) if isinstance(name, str) else name,
                                           dtype=object),
                         "cat": pd.Series(np.full(n, cat, dtype=object), dtype=object),
                         "args": pd.Series(args if args is not None else [None] * n, dtype=object)})


def _wait_spans(report: AnalysisReport, rank: int) -> pd.DataFrame:
    """Peer wait of each collective on this rank: [start, start + wait) on the aligned clock."""
    cross = report.cross_rank
    if cross is None or cross.members.empty or "wait_ns" not in cross.members:
        return _spans(pid_of(rank), np.zeros(0), np.zeros(0), "", "peer_wait")
    m = cross.members[(cross.members["rank"] == rank) & (cross.members["wait_ns"] > 0)]
    colls = cross.collectives.set_index("coll_id")
    names = m["coll_id"].map(colls["coll_name"]).fillna("collective").astype(str).to_numpy(dtype=object)
    late = m["coll_id"].map(colls["late_rank"]).fillna(-1).astype(int).to_numpy()
    start = m["start_ns"].to_numpy(dtype=np.int64)
    wait = m["wait_ns"].to_numpy(dtype=np.int64)
    args = [{"collective": int(c), "wait_us": w / 1e3, "late_rank": int(lr) if lr >= 0 else None}
            for c, w, lr in zip(m["coll_id"].to_numpy(), wait, late, strict=True)]
    return _spans(pid_of(rank), start, start + wait, np.asarray([f"wait: {n}" for n in names], dtype=object),
                  "peer_wait", args)


def _sync_spans(report: AnalysisReport, rank: int, offset: int) -> pd.DataFrame:
    """Blocking host syncs of this rank (host time, moved onto the aligned clock)."""
    df = report.syncs.get(rank)
    if df is None or df.empty:
        return _spans(pid_of(rank), np.zeros(0), np.zeros(0), "", "host_sync")
    s = df["start_ns"].to_numpy(dtype=np.int64) + offset
    e = np.maximum(df["end_ns"].to_numpy(dtype=np.int64) + offset, s)
    args = [{"caller": str(c), "host_blocked_us": hb / 1e3, "gpu_idle_us": gi / 1e3, "step": int(st)}
            for c, hb, gi, st in zip(df["caller"], df["host_blocked_ns"].to_numpy(dtype=float),
                                     df["gpu_idle_ns"].to_numpy(dtype=float), df["step"].to_numpy(), strict=True)]
    return _spans(pid_of(rank), s, e, df["api"].astype(str).to_numpy(dtype=object), "host_sync", args)


def _finding_markers(report: AnalysisReport, offsets: dict[int, int], first_ns: dict[int, int]) -> list[dict]:
    out = []
    for f in report.findings or []:
        rank = f.ranks[0] if f.ranks and f.ranks[0] in offsets else min(offsets, default=0)
        shift = 0 if f.id in ALIGNED_FINDINGS else offsets.get(rank, 0)
        ts = f.start_ns + shift if f.start_ns is not None else first_ns.get(rank, 0)
        out.append({"rank": rank, "ts_ns": int(ts), "name": f"{f.severity}: {f.id} — {f.title}",
                    "args": {"id": f.id, "severity": str(f.severity), "ranks": list(f.ranks), "title": f.title,
                             "explanation": f.explanation, "fix": f.fix, "evidence": f.evidence,
                             "end_us": (f.end_ns + shift - ts) / 1e3 if f.end_ns is not None else None}})
    return out


def _concat_columns(parts: list[dict[str, Any]], columns: tuple[str, ...]) -> pd.DataFrame:
    """One frame from per-rank columns: numpy arrays concatenated, categoricals united (no strings copied)."""
    out: dict[str, Any] = {}
    for c in columns:
        cols = [p[c] for p in parts]
        if cols and isinstance(cols[0], pd.Categorical):
            out[c] = union_categoricals(cols)
        elif cols and np.asarray(cols[0]).dtype.kind == "O":
            out[c] = pd.Series(np.concatenate([np.asarray(x, dtype=object) for x in cols]), dtype=object)
        else:
            out[c] = np.concatenate([np.asarray(x) for x in cols]) if cols else np.zeros(0, dtype=np.int64)
    return pd.DataFrame(out, columns=list(columns))


def perfetto_data(traces: TraceSet, report: AnalysisReport) -> PerfettoData:
    """Tracks, events and markers of a trace set and its analyze() report (see module docstring)."""
    aligned, offsets = aligned_traces(traces, report)
    gpu_parts, span_parts, track_rows, proc_rows = [], [], [], []
    first_ns: dict[int, int] = {}
    for t in aligned:
        pid = pid_of(t.rank)
        proc_rows.append({"pid": pid, "name": f"rank {t.rank}", "sort": t.rank})
        g = t.gpu
        s = g["start_ns"].to_numpy(dtype=np.int64)
        e = np.maximum(g["end_ns"].to_numpy(dtype=np.int64), s)
        if s.size:
            first_ns[t.rank] = int(s.min())
        is_comm, is_compute = (g["category"] == "comm").to_numpy(), (g["category"] == "compute").to_numpy()
        comm, compute = iv.union(s[is_comm], e[is_comm]), iv.union(s[is_compute], e[is_compute])
        hidden, exposed = iv.intersection(comm, compute), iv.difference(comm, compute)
        tracks: list[tuple[str, pd.DataFrame]] = [
            ("hidden comm: comm ∩ compute", _spans(pid, *hidden, "hidden comm", "hidden")),
            ("exposed comm", _spans(pid, *exposed, "exposed comm", "exposed")),
            ("peer wait", _wait_spans(report, t.rank)),
            ("blocking host syncs", _sync_spans(report, t.rank, offsets.get(t.rank, 0))),
        ]
        next_tid = 1
        track_rows.append({"pid": pid, "tid": next_tid, "name": "findings"})
        findings_tid, next_tid = next_tid, next_tid + 1
        for label, sp in tracks:
            lanes = split_lanes(np.zeros(len(sp), dtype=np.int64), sp["start_ns"].to_numpy(), sp["end_ns"].to_numpy())
            for k in range(int(lanes.max()) + 1 if lanes.size else 1):
                track_rows.append({"pid": pid, "tid": next_tid + k, "name": label + (f" · lane {k + 1}" if k else "")})
            span_parts.append(sp.assign(tid=next_tid + lanes))
            next_tid += int(lanes.max()) + 1 if lanes.size else 1
        first_ns.setdefault(t.rank, 0)
        proc_rows[-1]["findings_tid"] = findings_tid
        if not s.size:
            continue
        keys = pd.DataFrame({"d": g["device"].to_numpy(dtype=np.int64), "s": g["stream"].to_numpy(dtype=np.int64)})
        inverse = keys.groupby(["d", "s"], sort=True).ngroup().to_numpy(dtype=np.int64)  # hashing, no row sort
        pairs = keys.drop_duplicates().sort_values(["d", "s"]).to_numpy()
        lanes = split_lanes(inverse, s, e)
        n_lanes = np.zeros(len(pairs), dtype=np.int64)
        np.maximum.at(n_lanes, inverse, lanes + 1)
        lane_tid = np.r_[0, np.cumsum(n_lanes)[:-1]] + next_tid
        for i, (d, st) in enumerate(pairs):
            for k in range(int(n_lanes[i])):
                track_rows.append({"pid": pid, "tid": int(lane_tid[i] + k),
                                   "name": f"gpu {int(d)} · stream {int(st)}" + (f" · lane {k + 1}" if k else "")})
        gpu_parts.append({
            "pid": np.full(s.size, pid, dtype=np.int64), "tid": lane_tid[inverse] + lanes, "start_ns": s,
            "end_ns": e, "name": pd.Categorical.from_codes(g["name_id"].to_numpy(),
                                                           pd.Index(t.names.names, dtype=object)),
            "cat": pd.Categorical(g["category"]), "kind": pd.Categorical(g["kind"]),
            "correlation": g["correlation"].to_numpy(dtype=np.int64)})

    gpu = _concat_columns(gpu_parts, GPU_EVENT_COLUMNS)
    spans = _concat_columns([{c: f[c].to_numpy() for c in f} for f in span_parts], SPAN_COLUMNS)
    markers = _finding_markers(report, offsets, first_ns)
    procs = pd.DataFrame(proc_rows)
    for m in markers:
        m["pid"] = pid_of(m.pop("rank"))
        hit = procs.loc[procs["pid"] == m["pid"], "findings_tid"]
        m["tid"] = int(hit.iloc[0]) if len(hit) else 1
    times = [int(x.min()) for x in (gpu["start_ns"], spans["start_ns"]) if len(x)]
    times += [m["ts_ns"] for m in markers]
    origin = min(times) if times else 0
    for frame in (gpu, spans):
        if len(frame):
            frame["start_ns"] = frame["start_ns"].to_numpy(dtype=np.int64) - origin
            frame["end_ns"] = frame["end_ns"].to_numpy(dtype=np.int64) - origin
    for m in markers:
        m["ts_ns"] -= origin
    tracks_df = pd.DataFrame(track_rows, columns=["pid", "tid", "name"])
    tracks_df["sort"] = tracks_df["tid"]
    return PerfettoData(gpu=gpu, spans=spans, markers=markers, tracks=tracks_df,
                        processes=procs.drop(columns=["findings_tid"], errors="ignore"), origin_ns=int(origin),
                        offsets_ns=offsets,
                        meta={"label": report.label, "format": report.fmt, "sources": list(report.sources),
                              "origin_ns": int(origin), "clock_offsets_ns": {str(k): v for k, v in offsets.items()}})
