"""The collectives table: every communication kernel with its size, wait / transfer split and bandwidth.

One row per communication activity on each rank (kernels and peer copies): its operation, process
group and group size, message bytes (the profiler's "In msg nelems" / "Out msg nelems" × the dtype's
size; a peer copy's own bytes), its time split into waiting for the last peer and transfer (the
cross-rank analysis' peer wait, when the collective was matched; otherwise the whole kernel counts as
transfer and ``wait_known`` is False), NCCL's algorithm and bus bandwidth on the transfer time
(analyzers.crossrank.link_peaks), and how much of the transfer compute ran beside
(``overlap_share``; ``overlapped`` from ``CollectiveParams.overlapped_min_share`` on).

Rows are grouped by (operation, size bucket: powers of two) with medians, over all ranks and per rank,
and compared with the link's peak: ``--link-gbps`` or the GPU model's entry in LINK_PEAKS.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from analyzers.crossrank.collective_rows import bucket_floor, comm_library, comm_op, rank_rows, size_bucket
from analyzers.crossrank.frames import _codes, _slices
from analyzers.crossrank.link_peaks import link_peak_gbps
from analyzers.crossrank.report import CrossRankReport
from analyzers.io.plain import rows
from analyzers.timeline.model import TraceSet

__all__ = ["CollectiveParams", "CollectiveTable", "bucket_floor", "collective_table", "comm_library", "comm_op",
           "size_bucket"]


@dataclass(frozen=True)
class CollectiveParams:
    """Options of the collectives table; every default says why."""

    # Peak link bandwidth per GPU and direction (GB/s) to compare bus bandwidth with; None: from the
    # GPU model the trace names (link_peaks.LINK_PEAKS), else no comparison.
    link_gbps: float | None = None
    # A collective is "overlapped" when compute ran beside at least this share of its transfer time
    # (half: most of its bandwidth was measured while sharing the GPU).
    overlapped_min_share: float = 0.5
    # JSON lists at most this many rows (every row counts in the groups; `analyze --tables` has them all).
    max_listed: int = 100


@dataclass
class CollectiveTable:
    """The collectives table of a trace set (module docstring); plain data through document(), which reads the
    groups and first rows only: the whole table (millions of rows at a thousand ranks) is made from the traces and
    cross-rank report when ``rows`` is first read (app, export), or rank by rank (``row_chunks``: --tables)."""

    params: CollectiveParams
    groups: pd.DataFrame  # per (op, size bucket), all ranks
    rank_groups: pd.DataFrame  # per (rank, op, size bucket)
    link_gbps: float | None
    link_source: str
    notes: list[str]
    n_rows: int  # rows of the whole table
    head: pd.DataFrame  # its first params.max_listed rows
    source: Callable[[], Iterator[pd.DataFrame]] | None = field(default=None, repr=False, compare=False)
    _rows: pd.DataFrame | None = field(default=None, repr=False, compare=False)

    @property
    def rows(self) -> pd.DataFrame:
        """One row per communication activity per rank (ROW_COLUMNS), built on first use."""
        if self._rows is None:
            self._rows = pd.concat(list(self.source()), ignore_index=True) if self.source is not None else self.head
        return self._rows

    def row_chunks(self) -> Iterator[pd.DataFrame]:  # the same rows one rank at a time, none of them kept
        return self.source() if self._rows is None and self.source is not None else iter([self.rows])

    def document(self) -> dict[str, Any]:
        return {
            "link_gbps": self.link_gbps,
            "link_source": self.link_source,
            "n_rows": self.n_rows,
            "groups": rows(self.groups),
            # the groups per rank grow with ranks: the first max_listed (with their count when cut; every one:
            # `analyze --tables`, collective_groups.parquet)
            **({"n_per_rank": len(self.rank_groups)} if len(self.rank_groups) > self.params.max_listed else {}),
            "per_rank": rows(self.rank_groups.head(self.params.max_listed)),
            "rows": rows(self.head),
            "params": asdict(self.params),
            "notes": list(self.notes),
        }


ROW_COLUMNS = ["rank", "row", "start_ns", "end_ns", "stream", "name", "library", "op", "pg", "group_size", "dtype",
               "bytes", "dur_ns", "wait_ns", "transfer_ns", "wait_known", "algbw_gbps", "busbw_gbps",
               "overlap_share", "overlapped", "size_bucket", "link_fraction"]
# What the groups of all ranks read of each row (and overlapped).
_MEDIANS = ("bytes", "dur_ns", "wait_ns", "transfer_ns", "algbw_gbps", "busbw_gbps")  # as floats, as _groups reads them


def collective_table(traces: TraceSet, cross: CrossRankReport | None = None,
                     params: CollectiveParams | None = None) -> CollectiveTable:
    """The collectives table of a classified trace set; cross: its cross-rank report (peer wait), if any.

    cross.members' rows index the GPU tables of the traces given here, so pass the report made from the
    same traces (with a step selection, the selected rows). Each rank's rows are made in turn and kept only
    as far as the document needs them (the groups' inputs, the first rows); ``rows`` makes them again."""
    params = params or CollectiveParams()
    notes: list[str] = []
    link, source = _link(traces, params)
    cap = params.max_listed
    head: list[pd.DataFrame] = []
    inputs: dict[tuple[str, str], list[dict[str, np.ndarray]]] = {}  # per (op, size bucket): each rank's values
    rank_groups: list[pd.DataFrame] = []
    n_rows = no_size = no_wait = 0
    no_size_ops: set[str] = set()
    for p in _rank_parts(traces, _member_waits(cross), params, link):  # in rank order
        if n_rows < cap:
            head.append(p.head(cap - n_rows))
        n_rows += len(p)
        rank_groups.append(_groups(p, ["rank"], link))  # a rank's groups read its own rows only
        _add_group_inputs(inputs, p)
        sizeless = (p["bytes"] <= 0).to_numpy()
        no_size += int(sizeless.sum())
        no_size_ops.update(p["op"].to_numpy()[sizeless].tolist())
        no_wait += int((~p["wait_known"]).sum())
    if not inputs:
        table = pd.DataFrame({c: [] for c in ROW_COLUMNS})
        table["link_fraction"] = table["busbw_gbps"] / link if link else np.nan
        table = table[ROW_COLUMNS]
        return CollectiveTable(params, _groups(table, [], link), _groups(table, ["rank"], link), link, source, notes,
                               0, table.head(cap), _rows=table)
    if no_size:
        ops = ", ".join(sorted(no_size_ops)[:5])
        notes.append(f"{no_size} of {n_rows} communication activities carry no message size ({ops}): "
                     "no bandwidth for them")
    if no_wait:
        notes.append(f"{no_wait} communication activities have no peer wait (not "
                     "matched across ranks, or their peers are unknown): their bandwidth is on the whole kernel "
                     "time, any wait included")
    return CollectiveTable(params, _merged_groups(inputs, link), pd.concat(rank_groups, ignore_index=True), link,
                           source, notes, n_rows,
                           pd.concat(head, ignore_index=True).head(cap) if head else pd.DataFrame(columns=ROW_COLUMNS),
                           source=partial(_rank_chunks, traces, cross, params, link))


def _add_group_inputs(inputs: dict[tuple[str, str], list[dict[str, np.ndarray]]], p: pd.DataFrame) -> None:
    """A rank's values of what the groups' medians read, added to its (op, size bucket) groups' lists."""
    codes, keys = pd.factorize(pd.MultiIndex.from_arrays([p["op"].to_numpy(), p["size_bucket"].to_numpy()]))
    values = {c: p[c].to_numpy(dtype=float) for c in _MEDIANS} | {"overlapped": p["overlapped"].to_numpy(dtype=bool)}
    for k, key in enumerate(keys):
        sel = codes == k
        inputs.setdefault((str(key[0]), str(key[1])), []).append({c: v[sel] for c, v in values.items()})


def _merged_groups(inputs: dict[tuple[str, str], list[dict[str, np.ndarray]]], link: float | None) -> pd.DataFrame:
    """The groups over all ranks, as _groups makes them from the whole table, one (op, size bucket) at a time
    (only one group's values are joined at once)."""
    out: dict[str, list] = {c: [] for c in GROUP_COLUMNS[:-1]}
    for (op, bucket), parts in inputs.items():
        cols = {c: np.concatenate([d[c] for d in parts]) for c in (*_MEDIANS, "overlapped")}
        parts.clear()
        out["op"].append(op)
        out["size_bucket"].append(bucket)
        _add_stats(out, cols, cols.pop("overlapped"))
    return _group_frame(out, [], link)


def _rank_parts(traces: TraceSet, wait: dict[int, pd.Series], params: CollectiveParams,
                link: float | None) -> Iterator[pd.DataFrame]:
    """Each rank's rows of the table in their final form (ROW_COLUMNS), in rank order; empty ranks skipped."""
    for t in traces:
        p = rank_rows(t, wait.get(t.rank), params.overlapped_min_share)
        if len(p):
            p["link_fraction"] = p["busbw_gbps"] / link if link else np.nan
            yield p[ROW_COLUMNS]


def _rank_chunks(traces: TraceSet, cross: CrossRankReport | None, params: CollectiveParams,
                 link: float | None) -> Iterator[pd.DataFrame]:
    """Every rank's rows, rank by rank (CollectiveTable.rows and row_chunks)."""
    return _rank_parts(traces, _member_waits(cross), params, link)


def _member_waits(cross: CrossRankReport | None) -> dict[int, pd.Series]:
    """Per rank: wait_ns of each matched GPU row (indexed by row), from the peer-wait members (their rows'
    columns read once, sorted by rank: no copy of the members)."""
    if cross is None or cross.members.empty or "wait_ns" not in cross.members:
        return {}
    m = cross.members
    pos = np.searchsorted(cross.collectives["coll_id"].to_numpy(), m["coll_id"].to_numpy())
    known = cross.collectives["peers_known"].to_numpy(dtype=bool)[pos] if len(cross.collectives) else \
        np.zeros(len(m), dtype=bool)
    sel = np.flatnonzero(known)
    del pos, known
    rank = m["rank"].to_numpy()[sel]
    o = sel[np.argsort(rank, kind="stable")]  # by rank, in the members' order within a rank (as groupby)
    rank = m["rank"].to_numpy()[o]
    wait, row = m["wait_ns"].to_numpy(np.int64)[o], m["row"].to_numpy(np.int64)[o]
    return {int(r): pd.Series(wait[sl], index=row[sl]) for r, sl in _slices(rank).items()}


def _link(traces: TraceSet, params: CollectiveParams) -> tuple[float | None, str]:
    if params.link_gbps is not None:
        return float(params.link_gbps), "--link-gbps"
    names = sorted({n for t in traces for n in t.devices.values() if n})
    found = {n: link_peak_gbps(n) for n in names}
    known = {n: v for n, v in found.items() if v is not None}
    if not known:
        return None, "unknown GPU model: give --link-gbps" if names else "no GPU model in the trace: give --link-gbps"
    gbps = min(v[0] for v in known.values())  # mixed models: the slowest link bounds a collective
    name = next(n for n, v in known.items() if v[0] == gbps)
    return gbps, f"{name}: {known[name][1]}"


GROUP_COLUMNS = ["op", "size_bucket", "n", "n_overlapped", "bytes_median", "dur_median_ns", "wait_median_ns",
                 "transfer_median_ns", "algbw_median_gbps", "busbw_median_gbps", "busbw_alone_median_gbps",
                 "busbw_overlapped_median_gbps", "link_fraction"]


def _groups(table: pd.DataFrame, keys: list[str], link: float | None) -> pd.DataFrame:
    """Medians per (keys..., op, size bucket); alone and overlapped bus bandwidth apart. Grouped with numpy
    (one factorize, a loop over the groups, which are few), not pandas' groupby (0.2 s of fixed cost)."""
    by = [*keys, "op", "size_bucket"]
    if table.empty:
        return pd.DataFrame({c: [] for c in [*keys, *GROUP_COLUMNS]})
    # one code per distinct key, numbered in order of first appearance (no tuple per row: at many ranks
    # those were most of this table's memory)
    codes, _ = _codes(*(pd.factorize(table[c].to_numpy(), use_na_sentinel=False)[0].astype(np.int64) for c in by))
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0, True])
    cols = {c: table[c].to_numpy(dtype=float) for c in _MEDIANS}
    overlapped = table["overlapped"].to_numpy(dtype=bool)
    out: dict[str, list] = {c: [] for c in [*by, *GROUP_COLUMNS[2:-1]]}
    for g in range(len(bounds) - 1):
        rows = order[bounds[g]:bounds[g + 1]]
        for c in by:
            out[c].append(table[c].iat[int(rows[0])])
        _add_stats(out, {c: v[rows] for c, v in cols.items()}, overlapped[rows])
    return _group_frame(out, keys, link)


_MEDIAN_NAMES = dict(zip(_MEDIANS, GROUP_COLUMNS[4:10], strict=True))  # bytes -> bytes_median, ...


def _add_stats(out: dict[str, list], cols: dict[str, np.ndarray], ov: np.ndarray) -> None:
    """One group's count and medians (cols: _MEDIANS as floats; ov: its rows' overlapped) appended to out."""
    bus = cols["busbw_gbps"]
    out["n"].append(ov.size)
    out["n_overlapped"].append(int(ov.sum()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a group whose values are all NaN has no median
        for c in _MEDIANS:
            out[_MEDIAN_NAMES[c]].append(np.nanmedian(cols[c]))
        out["busbw_alone_median_gbps"].append(np.nanmedian(bus[~ov]) if (~ov).any() else np.nan)
        out["busbw_overlapped_median_gbps"].append(np.nanmedian(bus[ov]) if ov.any() else np.nan)


def _group_frame(out: dict[str, list], keys: list[str], link: float | None) -> pd.DataFrame:
    """The groups' rows in order of keys, operation and size."""
    frame = pd.DataFrame(out)
    frame["link_fraction"] = frame["busbw_median_gbps"] / link if link else np.nan
    frame["_floor"] = frame["size_bucket"].map(bucket_floor)
    frame = frame.sort_values([*keys, "op", "_floor"], kind="stable").drop(columns="_floor").reset_index(drop=True)
    frame["n"] = frame["n"].astype(np.int64)
    frame["n_overlapped"] = frame["n_overlapped"].astype(np.int64)
    return frame[[*keys, *GROUP_COLUMNS]]
