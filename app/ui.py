"""The Streamlit layer shared by every page: the session's sources and selection, cached loading.

Parsed traces and their analyses are cached with st.cache_resource keyed by the files'
fingerprint (path, size, mtime): switching pages or variants never re-parses, and an
edited file is re-read. Cached objects are shared between sessions and never mutated.
A run is loaded in up to two passes, the parse itself in the first only: as `overlapscope analyze`
loads it (the per-rank stage in the parse workers; the Overview's first chart and the whole analysis
are both made from that one load), and with its host tables, from the parse cache, when a page reads
them (Timeline, Syncs, Diff, downloads).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from analyzers.crossrank.clock import aligned_copy
from analyzers.errors import BadInputError
from analyzers.overlap.metrics import AnalysisOptions, OverlapMetrics, window_metrics
from analyzers.report import AnalysisReport, analyze, precomputed_results
from analyzers.timeline.model import TraceSet
from viz import labels
from viz.safe_text import markdown_text as md  # names from trace files: text, never Markdown
from viz.timeline import SYNC_COLUMNS, TimelineData, normalize_syncs, prepare_timeline

from . import data, preload
from .preload import opening_sources

MAIN_SCRIPT = Path(__file__).resolve().parent / "main.py"
PAGE_FILES = {
    "overview": "views/overview.py",
    "timeline": "views/timeline.py",
    "crossrank": "views/crossrank.py",
    "stragglers": "views/stragglers.py",
    "syncs": "views/syncs.py",
    "collectives": "views/collectives.py",
    "diff": "views/diff.py",
    "run": "views/run.py",
}
K_SOURCES, K_SELECTED, K_ROOTS, K_UPLOADS_DONE = "os_sources", "os_selected", "os_roots", "os_uploads_done"
K_FOCUS, K_MESSAGES, K_PENDING = "os_focus", "os_messages", "os_pending_select"
K_SIDEBAR_DRAWN = "os_sidebar_drawn"


# --------------------------------------------------------------------------- caches


@st.cache_resource(max_entries=16, show_spinner="Loading the host tables…")
def _trace_set(fp: data.Fingerprint, label: str) -> TraceSet:
    """The run with every table (host tables included), for the pages that read them."""
    return data.load_fingerprinted(fp, label)


@st.cache_resource(max_entries=32, show_spinner="Loading traces…")
def _analysis_set(fp: data.Fingerprint, label: str) -> TraceSet:
    """The run loaded as `overlapscope analyze` loads it (the per-rank stage run in the parse workers, host
    tables left there): the server's load for the opening runs when there is one (app/preload.py). Both the
    first chart's metrics and the whole analysis are read from this one load."""
    return preload.analysis_set(fp, label)


@st.cache_resource(max_entries=32, show_spinner="Analyzing…")
def _report(fp: data.Fingerprint, label: str) -> AnalysisReport:
    """The whole analysis of the run's one load: the cross-rank stage, the findings and the replay on the
    per-rank results the parse workers made."""
    return analyze(_analysis_set(fp, label), AnalysisOptions())


@st.cache_resource(max_entries=32, show_spinner="Loading traces…")
def _rank_report(fp: data.Fingerprint, label: str) -> AnalysisReport:
    """The per-rank metrics of the run's load: the Overview draws its first chart from them while the
    cross-rank stage and the findings run. Equal to _report's (the very same objects)."""
    ts = _analysis_set(fp, label)
    pre = precomputed_results(ts, AnalysisOptions(), False)
    if not pre:  # nothing precomputed (not loaded through the per-rank stage): the full report has them
        return _report(fp, label)
    return AnalysisReport(label=ts.label, fmt=ts.fmt, world_size=ts.world_size, sources=ts.sources,
                          ranks=[pre[r].metrics for r in ts.rank_ids()], notes=list(ts.notes),
                          clock_offsets_ns=dict(ts.clock_offsets_ns))


def _cross_rank(fp: data.Fingerprint, label: str) -> Any:
    """The cross-rank section analyze() computed (None for a single rank)."""
    return _report(fp, label).cross_rank


def _syncs(fp: data.Fingerprint, label: str) -> dict[int, pd.DataFrame]:
    """Blocking host syncs per rank, as analyze() found them."""
    return _report(fp, label).syncs


@st.cache_resource(max_entries=16, show_spinner=False)
def _aligned_set(fp: data.Fingerprint, label: str) -> TraceSet:
    """The trace set (host tables included) on the cross-rank analysis' common clock when it applied offsets."""
    cross = _cross_rank(fp, label)
    if cross is not None and cross.clock is not None and cross.clock.applied:
        return aligned_copy(_trace_set(fp, label), cross.clock.offsets_ns)
    return _trace_set(fp, label)


def aligned_set(run: Any) -> TraceSet:
    """The set a run's Timeline is drawn from (the common clock when offsets were applied)."""
    return _aligned_set(run.fp, run.label)


@st.cache_resource(max_entries=16, show_spinner="Preparing the timeline…")
def _timeline(fp: data.Fingerprint, label: str, ranks: tuple[int, ...] | None = None) -> TimelineData:
    """The timeline of the run, or of those ranks only (a run of 1024 ranks never draws them all)."""
    syncs = _syncs(fp, label)
    ts = _aligned_set(fp, label)
    if ranks is not None:
        ts = replace(ts, ranks={r: ts.ranks[r] for r in ranks if r in ts.ranks})
        syncs = {r: df for r, df in (syncs or {}).items() if r in ts.ranks} if syncs is not None else None
    if syncs is None:
        frame = None
    else:
        parts = [normalize_syncs(df, r) for r, df in syncs.items() if len(df)]
        frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({c: [] for c in SYNC_COLUMNS})
        if ts.clock_offsets_ns and any(ts.clock_offsets_ns.values()):  # host syncs onto the aligned clock too
            off = ts.clock_offsets_ns or {}
            frame = frame.assign(start_ns=frame["start_ns"] + frame["rank"].map(off).fillna(0).astype("int64"),
                                 end_ns=frame["end_ns"] + frame["rank"].map(off).fillna(0).astype("int64"))
    return prepare_timeline(ts, syncs=frame, label=label)


@st.cache_data(max_entries=256, show_spinner=False)
def _window_metrics(fp: data.Fingerprint, label: str, rank: int, lo: int, hi: int) -> dict[str, Any]:
    return window_metrics(_aligned_set(fp, label).ranks[rank].gpu, lo, hi).to_dict()


def _findings(fp: data.Fingerprint, label: str) -> list:
    """Every finding (per-rank detectors and the cross-rank ones), as analyze() found them."""
    return list(_report(fp, label).findings or [])


def _full_report(fp: data.Fingerprint, label: str) -> AnalysisReport:
    """The report diff and the downloads read (analyze() attaches findings, cross-rank and syncs), its
    aligned set with host tables (the Perfetto file's and the HTML report's timelines read them)."""
    rep = _report(fp, label)
    if rep.cross_rank is None or rep.cross_rank.aligned is None:
        return rep
    return replace(rep, cross_rank=replace(rep.cross_rank, aligned=_aligned_set(fp, label)))


@st.cache_resource(max_entries=32, show_spinner="Pricing every fix together…")
def _fix_all(fp: data.Fingerprint, label: str) -> dict[str, Any] | None:
    """The replay with every finding's fix at once (as `overlapscope whatif --fix A --fix B ...`); None when
    no finding names a fix or the run has no graph."""
    from analyzers.graph.analysis import whatif
    from analyzers.graph.fixes import FIX_OF_FINDING, Fix

    rep = _report(fp, label)
    fixes = sorted({FIX_OF_FINDING[f.id] for f in rep.findings or [] if f.id in FIX_OF_FINDING})
    if not fixes:
        return None
    if rep.graph_run is None:  # the findings name fixes, but there is no graph to replay them on
        return {"fixes": fixes, "unavailable": "not replayed: no dependency graph for this run"}
    out = whatif(rep.graph_run, [Fix(f) for f in fixes])
    return {k: out[k] for k in ("fixes", "measured_step_ns", "replayed_step_ns", "predicted_step_ns", "saving_ns",
                                "saving_fraction")}


@st.cache_resource(max_entries=16, show_spinner="Comparing…")
def _diff(fp_a: data.Fingerprint, label_a: str, fp_b: data.Fingerprint, label_b: str,
          names: tuple[str, str]) -> Any:
    from analyzers.diff import diff_reports

    return diff_reports(_full_report(fp_a, label_a), _full_report(fp_b, label_b), _trace_set(fp_a, label_a),
                        _trace_set(fp_b, label_b), names)


@dataclass
class Loaded:
    """A selected source and its fingerprint (the key of every cached result)."""

    source: data.Source
    fp: data.Fingerprint

    @property
    def label(self) -> str:
        return self.source.label

    def traces(self) -> TraceSet:
        return _trace_set(self.fp, self.label)

    def report(self) -> AnalysisReport:
        return _report(self.fp, self.label)

    def rank_report(self) -> AnalysisReport:
        return _rank_report(self.fp, self.label)

    def timeline(self, ranks: tuple[int, ...] | None = None) -> TimelineData:
        return _timeline(self.fp, self.label, ranks)

    def findings(self) -> list | None:
        return _findings(self.fp, self.label)

    def cross_rank(self) -> Any:
        return _cross_rank(self.fp, self.label)

    def full_report(self) -> AnalysisReport:
        return _full_report(self.fp, self.label)

    def fix_all(self) -> dict[str, Any] | None:
        return _fix_all(self.fp, self.label)

    def decision(self) -> Any:
        """The run's line of the decision table (viz/decision.py)."""
        from viz.decision import decide

        return decide(self.label, self.report(), self.source.manifest(), self.fix_all())

    def window_metrics(self, rank: int, lo: int, hi: int) -> OverlapMetrics:
        return OverlapMetrics(**_window_metrics(self.fp, self.label, rank, int(lo), int(hi)))


# --------------------------------------------------------------------------- sources


def app_paths() -> list[str]:
    """Paths given to `overlapscope app` / `streamlit run app/main.py -- PATH...`.

    sys.argv holds them only when this script is what `streamlit run` started (under a test
    runner sys.argv belongs to the runner); OVERLAPSCOPE_APP_PATHS is the other channel.
    """
    argv = sys.argv
    if argv and Path(argv[0]).resolve() == MAIN_SCRIPT and len(argv) > 1:
        return data.command_line_paths(argv[1:])
    return data.command_line_paths(None)


def init_state() -> None:
    """First run of a session: the sample traces and the command-line paths."""
    if K_SOURCES in st.session_state:
        return
    cli = app_paths()
    sources, default = opening_sources(cli)
    st.session_state[K_SOURCES] = sources
    st.session_state[K_ROOTS] = [str(r) for r in data.allowed_roots(cli)]
    st.session_state[K_UPLOADS_DONE] = {}
    st.session_state[K_MESSAGES] = []
    st.session_state[K_SELECTED] = _runs_from_query(sources) or default


def begin_run() -> None:
    """Start of every script run, before the page reads the selection: the session's state (init_state), and
    the runs added since the last run (uploads, server paths, the Run page) join the selection. The sidebar's
    widgets come later in the run (app/sidebar.py); a widget's value is in st.session_state from the run's
    start."""
    init_state()
    srcs = sources()
    current = [k for k in st.session_state[K_SELECTED] if k in srcs]
    pending = [k for k in st.session_state.pop(K_PENDING, []) if k in srcs and k not in current]
    st.session_state[K_SELECTED] = current + pending
    st.session_state[K_SIDEBAR_DRAWN] = False


def _runs_from_query(srcs: dict[str, data.Source]) -> list[str]:
    """`?runs=ag-gemm/sync-in-loop,ag-gemm/sync-before-loop`: a link that opens on those runs
    (labels or keys, in order; unknown names are ignored)."""
    raw = st.query_params.get("runs", "")
    by_label = {s.label: k for k, s in srcs.items()}
    out = []
    for name in (x.strip() for x in str(raw).split(",")):
        key = name if name in srcs else by_label.get(name)
        if key and key not in out:
            out.append(key)
    return out


def sources() -> dict[str, data.Source]:
    return st.session_state.get(K_SOURCES, {})


def add_source(src: data.Source, select: bool = True) -> None:
    """Make a source available; selecting it waits for the next run's sidebar (a widget's
    state cannot change after the widget was drawn in this run)."""
    st.session_state[K_SOURCES][src.key] = src
    if select:
        st.session_state.setdefault(K_PENDING, []).append(src.key)


def roots() -> list[Path]:
    return [Path(r) for r in st.session_state.get(K_ROOTS, [])]


def strip_tmp(text: str) -> str:
    """Upload errors name the user's file, not our temporary folder."""
    import re

    return re.sub(r"\S*/overlapscope-upload-[^/\s]+/", "", text)


def selected() -> list[data.Source]:
    srcs = sources()
    return [srcs[k] for k in st.session_state.get(K_SELECTED, []) if k in srcs]


def load(src: data.Source) -> Loaded | None:
    """One source, loaded (cached); an error line and None when it cannot be read."""
    try:
        fp = data.fingerprint(src.paths)
        _rank_report(fp, src.label)
    except BadInputError as exc:
        st.error(f"{md(src.label)}: {md(strip_tmp(str(exc)))}")
        return None
    return Loaded(source=src, fp=fp)


def diff(a: Loaded, b: Loaded, names: tuple[str, str]) -> Any:
    """analyzers.diff.diff_reports of two runs, with findings / cross-rank / syncs attached."""
    return _diff(a.fp, a.label, b.fp, b.label, names)


def load_selected(limit: int | None = None) -> list[Loaded]:
    """The selected sources, loaded (cached); one error line per source that fails."""
    out = [r for r in (load(src) for src in selected()[:limit]) if r is not None]
    if not out and not selected():
        st.info("Pick one or more runs in the sidebar.")
    return out


# --------------------------------------------------------------------------- cross-page links


def focus_timeline(source_key: str, lo_ns: int, hi_ns: int) -> None:
    """Open the Timeline on [lo, hi) of one run (a finding, a collective, a sync)."""
    st.session_state[K_FOCUS] = {"source": source_key, "lo": int(lo_ns), "hi": int(hi_ns)}
    if source_key not in st.session_state.get(K_SELECTED, []):
        st.session_state[K_SELECTED] = [source_key, *st.session_state.get(K_SELECTED, [])]
    labels = [sources()[k].label for k in st.session_state.get(K_SELECTED, []) if k in sources()]
    st.switch_page(PAGE_FILES["timeline"], query_params={"runs": ",".join(labels)} if labels else None)


def timeline_button(label: str, source_key: str, lo_ns: int | None, hi_ns: int | None, key: str,
                    pad: float = 0.1) -> None:
    """A button that jumps to the time range in the Timeline (padded so context shows)."""
    if lo_ns is None or hi_ns is None:
        return
    width = max(int(hi_ns) - int(lo_ns), 1000)
    if st.button(md(label), key=key):  # the label may name a kernel or a collective
        focus_timeline(source_key, int(lo_ns - pad * width), int(hi_ns + pad * width))


def pop_focus() -> dict[str, int | str] | None:
    return st.session_state.pop(K_FOCUS, None)


# --------------------------------------------------------------------------- formatting


def ms(ns: float | int | None) -> str:
    """A duration for people, as the metric registry writes it (viz/labels.py): 12.345 ms, n/a."""
    return labels.value("time", ns)


def pct(x: float | None) -> str:
    return labels.value("ratio", x)


def not_available(what: str, module: str) -> None:
    """The message a page shows while an analysis it needs has not landed."""
    st.info(f"{what} is not available yet: this build of overlapscope has no `{module}`.")
