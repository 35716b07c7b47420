"""What every per-rank detector shares: the shared thresholds, the rank's view, evidence formatting.

A detector reads one rank through RankView (its GPU rows with comm / compute / copy masks, built
once) and decides against its own thresholds (its module's Params, mixed into FindingParams).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import NamedTuple

import numpy as np
import pandas as pd

from analyzers.findings.finding import Severity
from analyzers.overlap.metrics import RankMetrics
from analyzers.overlap.rows import category_is
from analyzers.syncs.blocking import SyncParams
from analyzers.syncs.lookups import PerName
from analyzers.timeline import intervals as iv
from analyzers.timeline.constants import NO_TIME
from analyzers.timeline.grouped_intervals import window_pairs
from analyzers.timeline.iterations import DEFAULT_STEP_PATTERN, gpu_step_windows, host_steps
from analyzers.timeline.kernel_names import normalize_kernel_name
from analyzers.timeline.model import RankTrace
from analyzers.timeline.user_regex import search_each

NO_CALLER = "(no enclosing op)"  # evidence's caller name for a sync outside any op
# Pack/unpack and layout copies that run as kernels (or DtoD copies) next to collectives.
DEFAULT_COPY_KERNEL_PATTERN = (
    r"CatArrayBatchedCopy|direct_copy_kernel|copy_kernel|elementwise_kernel.*[Cc]opy|chunk_cat|"
    r"split_with_sizes_copy|_foreach_copy|multi_tensor_apply_kernel.*native::Copy<|^Memcpy DtoD"
)


@dataclass(frozen=True)
class SharedParams:
    """Thresholds every detector uses (fields of FindingParams, with each finding's own Params)."""

    critical_share: float = 0.10
    """A finding whose cost (GPU time lost) is at least this share of the analysed GPU span is
    'critical'; below, 'warning'."""
    copy_kernel_pattern: str = DEFAULT_COPY_KERNEL_PATTERN
    """Regex (re.search on the activity name) of copy kernels: they are neither compute that hides
    communication nor communication (default rules class them as compute)."""
    step_pattern: str = DEFAULT_STEP_PATTERN
    """Host ranges that are iterations (ProfilerStep#N); without any, the trace is one window."""
    sync: SyncParams = field(default_factory=SyncParams)
    """What counts as a blocking host sync (analyzers/syncs/blocking.py)."""

    @classmethod
    def field_docs(cls) -> dict[str, tuple[object, str]]:
        """{name: (default, doc)} read from the attribute docstrings of every Params class mixed in."""
        import ast
        import inspect

        docs: dict[str, str] = {}
        for klass in reversed(cls.__mro__):
            if "__dataclass_fields__" not in vars(klass):
                continue
            body = ast.parse(inspect.getsource(klass)).body[0].body  # type: ignore[attr-defined]
            for a, b in zip(body, body[1:], strict=False):
                if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant):
                    docs[a.target.id] = " ".join(str(b.value.value).split())  # type: ignore[attr-defined]
        defaults = cls()
        return {f.name: (getattr(defaults, f.name), docs.get(f.name, "")) for f in fields(cls) if f.name != "sync"}


@dataclass
class RankContext:
    """What a detector may need beyond the rank's view: its blocking syncs and transfer starts."""

    syncs: pd.DataFrame
    eff_start: np.ndarray | None = None  # comm starts moved to the last rank's arrival (shared clocks)


def plain(v: object) -> object:
    """JSON-safe evidence values (numpy scalars -> Python, NaN -> None)."""
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, np.ndarray):
        return [plain(x) for x in v.tolist()]
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        v = float(v)
    if isinstance(v, float) and not np.isfinite(v):
        return None
    return v


def fmt_ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def fmt_us(ns: float) -> str:
    return f"{ns / 1e3:.1f} µs"


def windows_of(trace: RankTrace, metrics: RankMetrics | None, step_pattern: str) -> pd.DataFrame:
    """The iteration windows to analyse: step, lo, hi (GPU clock), host_lo, host_hi.

    The windows the metrics used when given (so --steps applies), else the trace's step
    windows, else the whole trace as one window (step -1).
    """
    cols = ["step", "lo", "hi", "host_lo", "host_hi"]
    if metrics is not None and not metrics.iterations.empty:
        it = metrics.iterations
        step, lo, hi = (it[c].to_numpy(np.int64) for c in ("step", "window_start_ns", "window_end_ns"))
    else:
        g = gpu_step_windows(trace, step_pattern)
        if not g.empty:
            step, lo, hi = (g[c].to_numpy(np.int64) for c in ("step", "gpu_start_ns", "gpu_end_ns"))
        elif metrics is not None:
            step, lo, hi = (np.array([v], dtype=np.int64) for v in
                            (-1, metrics.whole.window_start_ns, metrics.whole.window_end_ns))
        elif not trace.gpu.empty:
            step, lo, hi = (np.array([v], dtype=np.int64) for v in
                            (-1, trace.gpu["start_ns"].min(), trace.gpu["end_ns"].max()))
        else:
            return pd.DataFrame({c: np.zeros(0, dtype=np.int64) for c in cols})
    host_lo, host_hi = _host_range(host_steps(trace, step_pattern), step)
    return pd.DataFrame({"step": step, "lo": lo, "hi": hi, "host_lo": host_lo, "host_hi": host_hi})


def _host_range(steps: pd.DataFrame, step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Host start and end of each step (NO_TIME when the trace has no such step range), as a pandas
    reindex and fillna give them: through float64 when some step is missing."""
    if steps.empty:
        return np.full(step.size, NO_TIME, dtype=np.int64), np.full(step.size, NO_TIME, dtype=np.int64)
    known = steps["step"].to_numpy(np.int64)
    order = np.argsort(known, kind="stable")
    pos = np.clip(np.searchsorted(known[order], step), 0, known.size - 1)
    found = known[order][pos] == step
    out = []
    for col in ("host_start_ns", "host_end_ns"):
        v = steps[col].to_numpy(np.int64)[order][pos]
        out.append(v if found.all() else np.where(found, v.astype(np.float64), float(NO_TIME)).astype(np.int64))
    return out[0], out[1]


class Window(NamedTuple):
    """One analysed window (a row of RankView.windows)."""

    step: int
    lo: int
    hi: int
    host_lo: int
    host_hi: int


@dataclass
class RankView:
    """One rank's GPU rows with the masks every detector needs, computed once."""

    trace: RankTrace
    params: SharedParams
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
    name_ids: PerName = field(init=False)  # the rows' distinct names (per_name runs once per name)
    _devices: list[int] = field(init=False)
    _memo: dict = field(init=False, default_factory=dict)  # what several detectors ask for

    def __post_init__(self) -> None:
        g = self.trace.gpu
        self.s = g["start_ns"].to_numpy(np.int64)
        self.e = g["end_ns"].to_numpy(np.int64)
        self.device = g["device"].to_numpy(np.int64)
        self.stream = g["stream"].to_numpy(np.int64)
        self.names = self.trace.names_of(g["name_id"].to_numpy()) if len(g) else np.zeros(0, dtype=object)
        self.name_ids = PerName(self.trace, g["name_id"].to_numpy())
        copy_name = search_each(self.params.copy_kernel_pattern, self.name_ids.names,
                                "the copy kernel pattern")[self.name_ids.codes]
        self.comm = category_is(g, "comm")
        self.copy = copy_name & ~self.comm
        self.compute = category_is(g, "compute") & ~self.copy
        self.other = ~(self.comm | self.compute | self.copy)
        self._devices = sorted(pd.unique(self.device).tolist())

    @property
    def lo(self) -> int:
        return int(self.windows["lo"].to_numpy().min()) if not self.windows.empty else 0

    @property
    def hi(self) -> int:
        return int(self.windows["hi"].to_numpy().max()) if not self.windows.empty else 0

    def window_list(self) -> list[Window]:
        """The windows as (step, lo, hi, host_lo, host_hi) tuples of Python ints, in table order."""
        w = self.windows
        if list(w.columns) != list(Window._fields):
            return [Window(*(getattr(r, f) for f in Window._fields)) for r in w.itertuples(index=False)]
        return [Window(*r) for r in zip(*(w[c].tolist() for c in Window._fields), strict=True)]

    def in_range(self, lo: int, hi: int) -> np.ndarray:
        return (self.e > lo) & (self.s < hi)

    def rows_in(self, lo: int, hi: int) -> np.ndarray:
        """Indices (ascending) of the rows in_range marks, found without a pass over every row: per-window
        loops cost what their windows hold, not the whole trace once per window (20,000 steps took
        minutes). Rows no longer than the 99th-percentile duration are found by their start; the few
        longer ones are checked each time."""
        order, starts, reach, long_rows = self.memo("rows_in", self._rows_index)  # type: ignore[misc]
        a = np.searchsorted(starts, lo - reach, side="right")  # a shorter row starting earlier ends by lo
        b = np.searchsorted(starts, hi, side="left")
        found = order[a:b]
        found = found[self.e[found] > lo]
        if long_rows.size:
            found = np.concatenate([found, long_rows[(self.e[long_rows] > lo) & (self.s[long_rows] < hi)]])
        return np.sort(found)

    def window_rows(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(window, row) pairs: every row with every window [lo[w], hi[w]) it overlaps (what rows_in finds),
        all windows at once (timeline.grouped_intervals.window_pairs)."""
        return window_pairs(self.s, self.e, lo, hi)

    def _rows_index(self) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
        dur = self.e - self.s
        reach = int(np.percentile(dur, 99)) if dur.size else 0
        short = np.flatnonzero(dur <= reach)
        order = short[np.argsort(self.s[short], kind="stable")]
        return order, self.s[order], reach, np.flatnonzero(dur > reach)

    def in_windows(self) -> np.ndarray:
        """Rows inside some analysed window: with --steps 2,5 the steps between are not analysed."""
        return iv.overlaps_any(self.s, self.e, self.windows["lo"].to_numpy(np.int64),
                               self.windows["hi"].to_numpy(np.int64))

    def span_ns(self) -> int:
        """Sum of the analysed windows (the denominator of 'share of time')."""
        w = self.windows
        return int(np.clip(w["hi"].to_numpy() - w["lo"].to_numpy(), 0, None).sum())

    def devices(self) -> list[int]:
        return list(self._devices)

    def memo(self, key: object, compute: Callable[[], object]) -> object:
        """compute() once per view and key (a result several detectors share)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]


def per_name(view: RankView, rows: np.ndarray, fn: Callable[[str], str]) -> np.ndarray:
    """fn of each selected row's name, computed once per distinct name (rows: mask or indices)."""
    codes = view.name_ids.codes[rows]
    if codes.size == 0:
        return np.zeros(0, dtype=object)
    return _of_used_names(view, codes, fn)[codes]


def _of_used_names(view: RankView, codes: np.ndarray, fn: Callable[[str], object]) -> np.ndarray:
    """fn of each distinct name among codes (object array over all distinct names, None elsewhere)."""
    used = np.zeros(len(view.name_ids.names), dtype=bool)
    used[codes] = True
    out = np.empty(used.size, dtype=object)
    for i in np.flatnonzero(used):
        out[i] = fn(view.name_ids.names[i])
    return out


def per_name_numbered(view: RankView, rows: np.ndarray, fn: Callable[[str], str]) -> tuple[np.ndarray, np.ndarray]:
    """per_name as (code per row, labels): codes number the distinct labels in sorted order, as a
    sorted group-by has them (pd.factorize(per_name(...), sort=True), without the rows' strings)."""
    return _numbered(view.name_ids.codes[rows], lambda codes: _of_used_names(view, codes, fn))


def _numbered(ids: np.ndarray, label_of: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """ids -> (code per id in the sorted order of their labels, sorted distinct labels); label_of(ids)
    gives an array indexed by id (ids are small non-negative ints)."""
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object)
    used = pd.unique(ids)
    code, labels = pd.factorize(np.asarray(label_of(used), dtype=object)[used], sort=True)
    lut = np.zeros(int(used.max()) + 1, dtype=np.int64)
    lut[used] = code
    return lut[ids], np.asarray(labels, dtype=object)


def copy_label(pattern: str) -> Callable[[str], str]:
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


def severity_of(cost_ns: float, span_ns: int, params: SharedParams) -> Severity:
    return Severity.critical if span_ns > 0 and cost_ns >= params.critical_share * span_ns else Severity.warning


def comm_kind(view: RankView) -> np.ndarray:
    """Collective kind per GPU row: the collective name when known, else the kernel name (read-only:
    made once per view)."""

    def kinds() -> np.ndarray:
        coll = view.trace.gpu["coll_name"].to_numpy(dtype=object)
        out = np.where(coll != "", coll, view.names)
        out.flags.writeable = False
        return out

    return view.memo("comm_kind", kinds)


def comm_kind_numbered(view: RankView) -> tuple[np.ndarray, np.ndarray]:
    """comm_kind as (code per row, kinds): codes number the distinct kinds in sorted order; -1 for a
    row without one (a missing collective name). Made from the distinct collective and kernel
    names, not from the rows' strings."""

    def numbered() -> tuple[np.ndarray, np.ndarray]:
        coll_code, coll = pd.factorize(view.trace.gpu["coll_name"])
        coll = list(coll)
        no_coll = np.r_[np.array([c == "" for c in coll], dtype=bool), False][coll_code]
        # source of each row's kind: collective i, or kernel name len(coll) + j
        source = np.where(no_coll, len(coll) + view.name_ids.codes, coll_code)
        labels = np.asarray(coll + view.name_ids.names, dtype=object)
        valid = source >= 0
        code = np.full(source.size, -1, dtype=np.int64)
        code[valid], kinds = _numbered(source[valid], lambda used: labels)
        return code, kinds

    return view.memo("comm_kind_numbered", numbered)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def fmt_wait(ns: float) -> str:
    """A wait in µs below a millisecond, else in ms (cross-rank findings' titles)."""
    return f"{ns / 1e3:,.1f} µs" if abs(ns) < 1e6 else f"{ns / 1e6:,.2f} ms"
