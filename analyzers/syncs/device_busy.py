"""What the GPU was doing around a sync: busy time before an instant, per-device timelines, and
the device a sync waited on."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzers.timeline import intervals as iv
from analyzers.timeline.constants import NO_TIME
from analyzers.timeline.iterations import launch_times
from analyzers.timeline.model import RankTrace

# ------------------------------------------------------------------------------------------
# GPU side


def busy_before(ms: np.ndarray, me: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Busy time of merged intervals (ms, me) before each time t (a prefix sum, vectorized)."""
    if ms.size == 0:
        return np.zeros(t.size, dtype=np.int64)
    cum = np.r_[0, np.cumsum(me - ms)]
    i = np.searchsorted(ms, t, side="right") - 1
    ic = np.clip(i, 0, ms.size - 1)
    inside = np.where(i >= 0, np.clip(t - ms[ic], 0, me[ic] - ms[ic]), 0)
    return np.where(i >= 0, cum[ic] + inside, 0)


@dataclass
class _DeviceTimeline:
    """One device's activity, indexed for 'next launched after t' and 'busy in [a, b)' queries."""

    merged_s: np.ndarray
    merged_e: np.ndarray
    launch_sorted: np.ndarray  # launch times, ascending (activities with a known launch)
    start_suffix_min: np.ndarray  # min start over activities launched at or after launch_sorted[i]
    end_prefix_max: np.ndarray  # max end over activities launched at or before launch_sorted[i]
    starts_sorted: np.ndarray  # all starts, ascending (fallback without launches)
    has_launches: bool

    @classmethod
    def build(cls, start: np.ndarray, end: np.ndarray, launch: np.ndarray) -> _DeviceTimeline:
        ms, me = iv.union(start, end)
        known = launch != NO_TIME
        order = np.argsort(launch[known], kind="stable")
        ls = launch[known][order]
        st = start[known][order]
        en = end[known][order]
        suffix = np.minimum.accumulate(st[::-1])[::-1] if st.size else st
        prefix = np.maximum.accumulate(en) if en.size else en
        return cls(ms, me, ls, suffix, prefix, np.sort(start, kind="stable"), bool(known.any()))

    def next_start_launched_from(self, t: np.ndarray) -> np.ndarray:
        """Start of the first activity launched at or after t (NO_TIME if none)."""
        if self.has_launches:
            i = np.searchsorted(self.launch_sorted, t, side="left")
            ok = i < self.launch_sorted.size
            return np.where(ok, self.start_suffix_min[np.clip(i, 0, max(self.launch_sorted.size - 1, 0))], NO_TIME)
        i = np.searchsorted(self.starts_sorted, t, side="left")
        ok = i < self.starts_sorted.size
        return np.where(ok, self.starts_sorted[np.clip(i, 0, max(self.starts_sorted.size - 1, 0))], NO_TIME)

    def pending_at(self, t: np.ndarray) -> np.ndarray:
        """Whether work launched before t was still unfinished at t."""
        if self.has_launches:
            i = np.searchsorted(self.launch_sorted, t, side="left") - 1
            ok = i >= 0
            return ok & (self.end_prefix_max[np.clip(i, 0, max(self.end_prefix_max.size - 1, 0))] > t)
        # without launch times: something is running at t
        return busy_before(self.merged_s, self.merged_e, t + 1) > busy_before(self.merged_s, self.merged_e, t)

    def drained_at(self, t: np.ndarray) -> np.ndarray:
        """When the work launched before t had all finished (t itself without launch records)."""
        if not self.has_launches:
            return t
        i = np.searchsorted(self.launch_sorted, t, side="left") - 1
        done = self.end_prefix_max[np.clip(i, 0, max(self.end_prefix_max.size - 1, 0))]
        return np.where(i >= 0, np.maximum(done, t), t)

    def idle_between(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Time in [a, b) with nothing running (0 where b <= a)."""
        span = np.maximum(b - a, 0)
        busy = busy_before(self.merged_s, self.merged_e, np.maximum(b, a)) - busy_before(self.merged_s,
                                                                                        self.merged_e, a)
        return np.maximum(span - busy, 0)


def _device_timelines(trace: RankTrace) -> dict[int, _DeviceTimeline]:
    gpu = trace.gpu
    launch = launch_times(trace)
    dev = gpu["device"].to_numpy()
    s, e = gpu["start_ns"].to_numpy(np.int64), gpu["end_ns"].to_numpy(np.int64)
    return {int(d): _DeviceTimeline.build(s[dev == d], e[dev == d], launch[dev == d]) for d in np.unique(dev)}


def _sync_devices(trace: RankTrace, start: np.ndarray, corr: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """Device of each sync: from its GPU-side record or its copy (correlation), else the device of
    the last activity its process launched before it, else the rank's busiest device."""
    out = np.full(start.size, -1, dtype=np.int64)
    gpu = trace.gpu
    if gpu.empty:
        return np.zeros(start.size, dtype=np.int64)
    devs = gpu["device"].to_numpy()
    if np.unique(devs).size == 1:
        return np.full(start.size, int(devs[0]), dtype=np.int64)
    for table in (trace.sync_events, gpu):
        if table.empty:
            continue
        by_corr = pd.Series(table["device"].to_numpy(), index=table["correlation"].to_numpy())
        by_corr = by_corr[by_corr.index >= 0]
        by_corr = by_corr[~by_corr.index.duplicated()]
        found = by_corr.reindex(corr).to_numpy(dtype=np.float64)
        fill = (out < 0) & ~np.isnan(found)
        out[fill] = found[fill].astype(np.int64)
    launch = launch_times(trace)  # checks the host tables are here (require_host_tables)
    rt = trace.runtime
    if (out < 0).any() and (launch != NO_TIME).any() and not rt.empty:
        corr_pid = pd.Series(rt["pid"].to_numpy(), index=rt["correlation"].to_numpy())
        corr_pid = corr_pid[~corr_pid.index.duplicated()]
        gpid = corr_pid.reindex(gpu["correlation"].to_numpy()).to_numpy(dtype=np.float64)
        known = launch != NO_TIME
        acts = pd.DataFrame({"t": launch[known], "pid": np.nan_to_num(gpid[known], nan=-1).astype(np.int64),
                             "dev": devs[known].astype(np.int64)}).sort_values("t", kind="stable")
        need = np.flatnonzero(out < 0)
        qs = pd.DataFrame({"t": start[need], "pid": pid[need].astype(np.int64), "q": need}).sort_values("t")
        hit = pd.merge_asof(qs, acts, on="t", by="pid", direction="backward")
        d = hit["dev"].to_numpy(dtype=np.float64)
        ok = ~np.isnan(d)
        out[hit["q"].to_numpy()[ok]] = d[ok].astype(np.int64)
    if (out < 0).any():
        busiest = int(gpu.assign(d=gpu["end_ns"] - gpu["start_ns"]).groupby("device")["d"].sum().idxmax())
        out[out < 0] = busiest
    return out
