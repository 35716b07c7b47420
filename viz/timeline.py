"""Timeline data: a trace set flattened once into lanes and colour groups, ready for LOD.

Preparing is the expensive part (one sort of every GPU activity, the overlap and
exposed-communication bands of each rank); it is done once per trace set and cached by the
app. Every zoom, step or window change then only masks, clips and merges (viz/lod.py).

Lanes, top to bottom per rank: a band lane (overlap = busy(comm) ∩ busy(compute), exposed
communication = busy(comm) − busy(compute), the very sets the metrics measure), a host-sync
lane when the rank has blocking syncs, then one lane per (device, stream).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analyzers.timeline import intervals as iv
from analyzers.timeline.iterations import gpu_step_windows
from analyzers.timeline.model import CATEGORIES, TraceSet

from .lod import DEFAULT_MAX_SEGMENTS, DEFAULT_WIDTH_PX, Segments, lod_segments, sort_for_lod

# Colour codes: the GPU categories, then the bands and the host syncs (those that left the GPU idle, and the
# harmless ones that caused no GPU idle, such as a run's closing cudaDeviceSynchronize).
CODES = ("other", "memset", "copy", "compute", "comm", "overlap", "exposed_comm", "host_sync", "harmless_sync")
CODE = {name: i for i, name in enumerate(CODES)}
N_CODES = len(CODES)
_CATEGORY_TO_CODE = np.array([CODE[c] for c in CATEGORIES], dtype=np.int64)  # categorical code -> CODE

SYNC_COLUMNS = ("rank", "start_ns", "end_ns", "name", "blocked_ns", "gpu_idle_ns", "caller")
SYNC_EXTRA_COLUMNS = ("kind", "sync_op", "annotation", "step", "device", "stream")  # kept when present


@dataclass
class TimelineData:
    """One trace set, flattened: rows sorted by (group, start), group = lane * N_CODES + code."""

    label: str
    lanes: pd.DataFrame  # lane, rank, kind ("band" | "sync" | "stream"), device, stream, label
    starts: np.ndarray
    ends: np.ndarray
    groups: np.ndarray
    name_idx: np.ndarray  # per row, into name_list (-1: a band)
    name_list: list[str]
    steps: pd.DataFrame  # step, start_ns, end_ns: each step's GPU window, union over ranks
    syncs: pd.DataFrame  # SYNC_COLUMNS
    t_min: int
    t_max: int
    n_activities: int
    notes: list[str] = field(default_factory=list)

    def step_window(self, step: int | None) -> tuple[int, int]:
        """[start, end) of a step (None: the whole trace); the whole trace if the step is absent."""
        if step is not None and not self.steps.empty:
            hit = self.steps[self.steps["step"] == step]
            if not hit.empty:
                return int(hit["start_ns"].iloc[0]), int(hit["end_ns"].iloc[0])
        return self.t_min, self.t_max


def blocking_syncs_frame(traces: TraceSet) -> tuple[pd.DataFrame, str | None]:
    """Blocking host syncs of every rank from analyzers.syncs.blocking, in SYNC_COLUMNS.

    Returns (frame, note): the note says why there are none when the analysis is missing.
    """
    try:
        from analyzers.syncs.blocking import blocking_syncs
    except ImportError:
        return (pd.DataFrame({c: [] for c in SYNC_COLUMNS}),
                "host-sync analysis (analyzers.syncs.blocking) not available yet")
    frames = []
    for t in traces:
        df = blocking_syncs(t)
        if df is None or len(df) == 0:
            continue
        frames.append(normalize_syncs(df, t.rank))
    if not frames:
        return pd.DataFrame({c: [] for c in SYNC_COLUMNS}), None
    return pd.concat(frames, ignore_index=True), None


def normalize_syncs(df: pd.DataFrame, rank: int) -> pd.DataFrame:
    """Map a blocking_syncs() table onto the columns the app draws (missing ones filled)."""
    def col(*names: str, default: object = None) -> pd.Series:
        for n in names:
            if n in df.columns:
                return df[n]
        return pd.Series([default] * len(df), index=df.index)

    start = col("start_ns", "host_start_ns").to_numpy(dtype=np.int64)
    end = col("end_ns", "host_end_ns").to_numpy(dtype=np.int64)
    return pd.DataFrame({
        "rank": np.full(len(df), rank, dtype=np.int64),
        "start_ns": start,
        "end_ns": end,
        "name": col("name", "api", default="sync").astype(str).to_numpy(),
        "blocked_ns": col("blocked_ns", "host_blocked_ns", default=np.nan).to_numpy(dtype=float),
        "gpu_idle_ns": col("gpu_idle_ns", "idle_caused_ns", default=np.nan).to_numpy(dtype=float),
        "caller": col("caller", "host_op", "annotation", default="").fillna("").astype(str).to_numpy(),
        **{c: df[c].to_numpy() for c in SYNC_EXTRA_COLUMNS if c in df.columns},
    })


def _bands(s: np.ndarray, e: np.ndarray, cat: np.ndarray) -> tuple[iv.Intervals, iv.Intervals]:
    comm = iv.union(s[cat == "comm"], e[cat == "comm"])
    comp = iv.union(s[cat == "compute"], e[cat == "compute"])
    return iv.intersection(comm, comp), iv.difference(comm, comp)


def prepare_timeline(traces: TraceSet, syncs: pd.DataFrame | None = None, label: str = "") -> TimelineData:
    """Flatten a trace set into sorted lane/colour rows (see the module docstring).

    syncs: a frame in SYNC_COLUMNS (blocking_syncs_frame); None fetches it from analyzers.syncs.blocking.
    """
    notes: list[str] = []
    if syncs is None:
        syncs, note = blocking_syncs_frame(traces)
        if note:
            notes.append(note)
    lane_rows: list[dict] = []
    parts_s, parts_e, parts_g, parts_n = [], [], [], []
    name_list: list[str] = []
    step_frames = []
    t_min, t_max = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    n_act = 0
    for t in traces:
        gpu = t.gpu
        s = gpu["start_ns"].to_numpy(dtype=np.int64)
        e = gpu["end_ns"].to_numpy(dtype=np.int64)
        cat = gpu["category"].to_numpy()
        n_act += s.size
        if s.size:
            t_min, t_max = min(t_min, int(s.min())), max(t_max, int(e.max()))
        # band lane
        band_lane = len(lane_rows)
        lane_rows.append({"rank": t.rank, "kind": "band", "device": -1, "stream": -1,
                          "label": f"rank {t.rank} · overlap / exposed"})
        (os_, oe), (xs, xe) = _bands(s, e, cat)
        for (bs, be), code in (((os_, oe), CODE["overlap"]), ((xs, xe), CODE["exposed_comm"])):
            parts_s.append(bs)
            parts_e.append(be)
            parts_g.append(np.full(bs.size, band_lane * N_CODES + code, dtype=np.int64))
            parts_n.append(np.full(bs.size, -1, dtype=np.int64))
        # host sync lane
        rs = syncs[syncs["rank"] == t.rank] if len(syncs) else syncs
        if len(rs):
            sync_lane = len(lane_rows)
            lane_rows.append({"rank": t.rank, "kind": "sync", "device": -1, "stream": -1,
                              "label": f"rank {t.rank} · host syncs"})
            parts_s.append(rs["start_ns"].to_numpy(dtype=np.int64))
            parts_e.append(rs["end_ns"].to_numpy(dtype=np.int64))
            harmful = rs["gpu_idle_ns"].fillna(0).to_numpy() > 0
            parts_g.append(sync_lane * N_CODES + np.where(harmful, CODE["host_sync"], CODE["harmless_sync"]))
            parts_n.append(np.full(len(rs), -1, dtype=np.int64))
        # stream lanes
        if s.size:
            dev = gpu["device"].to_numpy(dtype=np.int64)
            stream = gpu["stream"].to_numpy(dtype=np.int64)
            pairs, inverse = np.unique(np.stack([dev, stream], axis=1), axis=0, return_inverse=True)
            first_lane = len(lane_rows)
            for d, st in pairs:
                lane_rows.append({"rank": t.rank, "kind": "stream", "device": int(d), "stream": int(st),
                                  "label": f"rank {t.rank} · gpu {int(d)} · stream {int(st)}"})
            codes = _CATEGORY_TO_CODE[gpu["category"].cat.codes.to_numpy().astype(np.int64)]
            parts_s.append(s)
            parts_e.append(e)
            parts_g.append((first_lane + inverse.ravel().astype(np.int64)) * N_CODES + codes)
            parts_n.append(gpu["name_id"].to_numpy(dtype=np.int64) + len(name_list))
            name_list.extend(t.names.names)
        windows = gpu_step_windows(t)
        if not windows.empty:
            step_frames.append(windows[["step", "gpu_start_ns", "gpu_end_ns"]])

    starts = np.concatenate(parts_s) if parts_s else np.zeros(0, dtype=np.int64)
    ends = np.concatenate(parts_e) if parts_e else np.zeros(0, dtype=np.int64)
    groups = np.concatenate(parts_g) if parts_g else np.zeros(0, dtype=np.int64)
    names = np.concatenate(parts_n) if parts_n else np.zeros(0, dtype=np.int64)
    order = sort_for_lod(starts, ends, groups)
    if t_min > t_max:
        t_min = t_max = 0
    if step_frames:
        allw = pd.concat(step_frames, ignore_index=True)
        steps = (allw.groupby("step", as_index=False)
                 .agg(start_ns=("gpu_start_ns", "min"), end_ns=("gpu_end_ns", "max"))
                 .astype({"step": np.int64, "start_ns": np.int64, "end_ns": np.int64})
                 .sort_values("start_ns", kind="stable").reset_index(drop=True))
    else:
        steps = pd.DataFrame({"step": np.zeros(0, np.int64), "start_ns": np.zeros(0, np.int64),
                              "end_ns": np.zeros(0, np.int64)})
    lanes = pd.DataFrame(lane_rows, columns=["rank", "kind", "device", "stream", "label"])
    lanes.insert(0, "lane", np.arange(len(lanes), dtype=np.int64))
    return TimelineData(
        label=label or traces.label, lanes=lanes, starts=starts[order], ends=ends[order], groups=groups[order],
        name_idx=names[order], name_list=name_list, steps=steps, syncs=syncs.reset_index(drop=True),
        t_min=int(t_min), t_max=int(t_max), n_activities=int(n_act), notes=notes,
    )


@dataclass
class LaneSegments:
    """One variant's LOD segments for a window, with what the figure needs to draw them."""

    data: TimelineData
    origin_ns: int  # x = (t - origin) is what the figure shows (aligned at the step start)
    lo_ns: int
    hi_ns: int
    segments: Segments


def lod_for_windows(datas: list[TimelineData], windows: list[tuple[int, int, int]],
                    width_px: int = DEFAULT_WIDTH_PX, max_segments: int = DEFAULT_MAX_SEGMENTS
                    ) -> list[LaneSegments]:
    """LOD for several variants at once under ONE segment budget.

    windows: (origin, lo, hi) per variant. The pixel is the widest visible window over
    width_px (all variants share the x axis), and the budget is split by each variant's
    share of input rows, so a dense variant cannot starve a sparse one.
    """
    if len(datas) != len(windows):
        raise ValueError("one window per variant")
    widest = max((hi - lo for _, lo, hi in windows), default=1)
    px = max(1, int(np.ceil(widest / max(1, width_px))))
    sizes = np.array([max(1, d.starts.size) for d in datas], dtype=float)
    shares = np.maximum(1, np.floor(max_segments * sizes / sizes.sum()).astype(np.int64))
    out = []
    for d, (origin, lo, hi), budget in zip(datas, windows, shares, strict=True):
        seg = lod_segments(d.starts, d.ends, d.groups, lo, hi, min_gap_ns=px, max_segments=int(budget),
                           presorted=True)
        out.append(LaneSegments(data=d, origin_ns=int(origin), lo_ns=int(lo), hi_ns=int(hi), segments=seg))
    return out
