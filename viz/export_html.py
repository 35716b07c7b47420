"""Shareable files of an analysis: a self-contained HTML report and a PNG / SVG timeline.

The report is one HTML file with Plotly's JavaScript embedded once (it opens with no network):
metrics table, overview and per-iteration figures, findings with their evidence and fixes,
blocking host syncs, the cross-rank section and the timeline. The timeline is the app's own
figure (viz/figures.py) at the app's default level of detail (viz/lod.py), so a trace set of
a million kernels still makes a page of a few MB. Two trace sets make a diff report: the
verdict, the comparison tables, and both timelines on one shared x axis.

Static images go through Plotly's export (kaleido) driven by the system Chromium.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from analyzers.diff import TraceDiff
from analyzers.export.perfetto import aligned_traces
from analyzers.findings import sort_findings
from analyzers.report import AnalysisReport
from analyzers.timeline.model import TraceSet

from . import diff_tables
from .collectives_figure import busbw_figure, plottable
from .collectives_tables import collectives_section
from .critical import STEP_HEADER, fidelity_line, saving_text, step_rows
from .critical_figures import attribution_figure
from .crossrank_tables import sections as cross_rank_sections
from .figures import iteration_figure, overview_bars, peer_wait_bars, skew_heatmap, timeline_figure
from .formats import ms
from .labels import header
from .lod import DEFAULT_MAX_SEGMENTS, DEFAULT_WIDTH_PX
from .safe_text import html_text
from .scale_tables import straggler_section
from .tables import RANK_COLUMNS, rank_rows, sync_section
from .timeline import SYNC_COLUMNS, TimelineData, lod_for_windows, normalize_syncs, prepare_timeline

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
PLOT_CONFIG = {"displaylogo": False, "scrollZoom": True}
STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;padding:0 16px;max-width:1700px;
color:#222}
h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:1.6em}
table{border-collapse:collapse;font-size:13px;margin:8px 0}th,td{border:1px solid #ddd;padding:3px 8px}
th{background:#f4f4f4;text-align:left}td{text-align:right}td.t{text-align:left}
.finding{border-left:5px solid #999;padding:6px 12px;margin:12px 0;background:#fafafa}
.critical{border-color:#d62728}.warning{border-color:#ff9f1c}.info{border-color:#1f77b4}
.verdict{font-size:1.15em;padding:10px 14px;background:#eef6ee;border:1px solid #9c9}
.muted{color:#666;font-size:13px}code{background:#f0f0f0;padding:0 3px}
"""


class ImageExportError(RuntimeError):
    """The static image could not be made (no system Chromium, or the export failed)."""


# --------------------------------------------------------------------------- timelines


def report_timeline(traces: TraceSet, report: AnalysisReport, label: str = "") -> TimelineData:
    """The app's timeline data for a report: its aligned clock, and its blocking syncs moved onto it."""
    aligned, offsets = aligned_traces(traces, report)
    if not report.diagnosed:
        syncs = pd.DataFrame({c: [] for c in SYNC_COLUMNS})
    else:
        parts = [normalize_syncs(df, r) for r, df in report.syncs.items() if len(df)]
        syncs = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({c: [] for c in SYNC_COLUMNS})
        if len(syncs) and any(offsets.values()):
            shift = syncs["rank"].map(offsets).fillna(0).astype("int64")
            syncs = syncs.assign(start_ns=syncs["start_ns"] + shift, end_ns=syncs["end_ns"] + shift)
    return prepare_timeline(aligned, syncs=syncs, label=label or report.label)


def timeline_of(datas: Sequence[TimelineData], windows: Sequence[tuple[int, int, int]] | None = None,
                width_px: int = DEFAULT_WIDTH_PX, title: str | None = None) -> go.Figure:
    """The app's timeline figure of whole traces (or windows: origin, lo, hi) at its default detail."""
    windows = list(windows) if windows is not None else [(d.t_min, d.t_min, d.t_max) for d in datas]
    segments = lod_for_windows(list(datas), windows, width_px=width_px, max_segments=DEFAULT_MAX_SEGMENTS)
    return timeline_figure(segments, width_px=width_px, title=title)


def diff_windows(d: TraceDiff, datas: Sequence[TimelineData]) -> list[tuple[int, int, int]]:
    """Both sides from the iteration the diff aligned on to their ends, one length: a shared x axis."""
    al = d.alignment
    starts = [datas[0].step_window(al.get("step_a"))[0], datas[1].step_window(al.get("step_b"))[0]]
    length = max(max(dt.t_max - s, 1) for dt, s in zip(datas, starts, strict=True))
    return [(s, s, s + length) for s in starts]


# --------------------------------------------------------------------------- static images


def chromium_path() -> str:
    """The system Chromium (OVERLAPSCOPE_CHROMIUM, BROWSER_PATH, Debian's /usr/bin/chromium); never a download."""
    for cand in (os.environ.get("OVERLAPSCOPE_CHROMIUM"), os.environ.get("BROWSER_PATH"), *CHROMIUM_CANDIDATES,
                 shutil.which("chromium")):
        if cand and Path(cand).is_file():
            return cand
    raise ImageExportError("no system Chromium found for the image export: install Debian's chromium "
                           "(apt-get install chromium) or set OVERLAPSCOPE_CHROMIUM to its path")


def static_figure(fig: go.Figure) -> go.Figure:
    """The same figure drawn as SVG traces (WebGL traces become their SVG twins): images need no GPU."""
    out = go.Figure(fig)
    out.data = []
    for tr in fig.data:
        spec = tr.to_plotly_json()
        if spec.get("type") == "scattergl":
            spec["type"] = "scatter"
        out.add_trace(spec)
    return out


@contextmanager
def image_browser() -> Iterator[None]:
    """One Chromium for several images (each figure_image inside reuses it: ~0.5 s instead of ~5 s)."""
    import kaleido

    os.environ["BROWSER_PATH"] = chromium_path()
    kaleido.start_sync_server(n=1, mathjax=False, silence_warnings=True)
    try:
        yield
    finally:
        kaleido.stop_sync_server(silence_warnings=True)


def figure_image(fig: go.Figure, fmt: str = "png", width: int = 1600, height: int | None = None) -> bytes:
    """PNG or SVG bytes of a figure at width x height pixels (height: the figure's own)."""
    import kaleido

    os.environ["BROWSER_PATH"] = chromium_path()
    h = int(height or fig.layout.height or 600)
    try:
        with warnings.catch_warnings():  # inside image_browser() kaleido ignores kopts, and says so
            warnings.simplefilter("ignore", UserWarning)
            return kaleido.calc_fig_sync(static_figure(fig), opts={"format": fmt, "width": int(width), "height": h,
                                                                   "scale": 1}, kopts={"mathjax": False})
    except Exception as exc:  # kaleido/choreographer raise many kinds; one clear line for the user
        raise ImageExportError(f"image export through kaleido failed: {exc}") from exc


# --------------------------------------------------------------------------- HTML pieces


def _e(text: object) -> str:
    return html_text(text)


def html_table(header: Sequence[str], rows: Sequence[Sequence[object]], text_cols: Sequence[int] = (0,)) -> str:
    """An HTML table, or a "none" line when there are no rows (never a table of headers alone)."""
    if not rows:
        return '<p class="muted">none</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f'<td class="t">{_e(c)}</td>' if i in text_cols else f"<td>{_e(c)}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class _Figures:
    """Plotly divs of one page: the JavaScript bundle goes into the first one only."""

    def __init__(self) -> None:
        self.first = True

    def __call__(self, fig: go.Figure, div_id: str) -> str:
        out = pio.to_html(fig, full_html=False, include_plotlyjs=self.first, include_mathjax=False,
                          config=PLOT_CONFIG, div_id=div_id)
        self.first = False
        return out


def _evidence(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str) if isinstance(value, dict | list) else str(value)
    return text if len(text) <= 400 else text[:397] + "..."


def findings_html(report: AnalysisReport) -> str:
    if report.findings is None:
        return '<p class="muted">Not diagnosed (--no-diagnose).</p>'
    if not report.findings:
        return "<p>No cause of lost overlap found.</p>"
    parts = []
    for f in sort_findings(report.findings):
        ev = "".join(f"<li>{_e(k)}: <code>{_e(_evidence(v))}</code></li>" for k, v in f.evidence.items())
        parts.append(f'<div class="finding {_e(f.severity)}"><h3>{_e(f.severity)}: <code>{_e(f.id)}</code> — '
                     f"{_e(f.title)}</h3><p>{_e(f.explanation)}</p><details><summary>evidence</summary><ul>{ev}"
                     f"</ul></details><p><b>Fix:</b> {_e(f.fix)}"
                     + (f" — <b>{_e(saving_text(f.saving_ns, f.saving_fraction))}</b>"
                        if f.saving_ns is not None else "")
                     + "</p></div>")
    return "\n".join(parts)


def _critical_html(doc: dict, fig) -> str:
    cp = doc.get("critical_path")
    if cp is None:
        return '<p class="muted">Not computed (--no-diagnose or --steps).</p>'
    return "\n".join([f"<p>{_e(fidelity_line(cp))}</p>", html_table(STEP_HEADER, step_rows(cp), text_cols=(10,)),
                      fig(attribution_figure(cp), "critical-path")])


def _syncs_html(doc: dict) -> str:
    syncs = sync_section(doc)
    if not syncs.get("n"):
        return '<p class="muted">No blocking host syncs.</p>' if doc["findings"] is not None else ""
    rows = [[g["rank"], g["api"], str(g["caller"])[:80], g["n"], ms(g["host_blocked_ns"]), ms(g["gpu_idle_ns"]),
             g["steps"]] for g in syncs["groups"][:30]]
    return html_table([header(k) for k in ("rank", "api", "caller")] + ["syncs"]
                      + [header(k) for k in ("host_blocked_ns", "gpu_idle_ns")] + ["steps"], rows,
                      text_cols=(1, 2))


def _cross_rank_html(report: AnalysisReport, doc: dict, fig) -> str:
    cross = report.cross_rank
    if cross is None or cross.clock is None:
        return '<p class="muted">One rank: no cross-rank analysis.</p>'
    parts = []
    straggler = straggler_section(doc.get("stragglers"))
    for s in [*cross_rank_sections(doc["cross_rank"]), *([straggler] if straggler else [])]:
        parts.append(f"<h3>{_e(s.title)}</h3>")
        parts.append(html_table(s.header, s.rows, text_cols=range(len(s.header))))
        if s.caption:
            parts.append(f'<p class="muted">{_e(s.caption)}</p>')
    if len(cross.collectives):
        parts.append(fig(skew_heatmap(cross.collectives_by_rank(), cross.ranks), "skew"))
    pw = pd.DataFrame([{"rank": r, **{k: v for k, v in d.items() if not isinstance(v, dict)}}
                       for r, d in cross.peer_wait.items()])
    if len(pw) and pw["n_collectives"].sum() > 0:
        parts.append(fig(peer_wait_bars(pw), "peer-wait"))
    return "\n".join(parts)


def _collectives_html(report: AnalysisReport, doc: dict, fig) -> str:
    coll = doc.get("collectives")
    sec = collectives_section(coll) if coll is not None else None
    if sec is None:
        return '<p class="muted">No communication recognised.</p>'
    parts = [html_table(sec.header, sec.rows, text_cols=(0, 1)), f'<p class="muted">{_e(sec.caption)}</p>']
    parts += [f'<p class="muted">{_e(n)}</p>' for n in coll["notes"]]
    table = report.collectives  # every row for the figure (the document lists at most params.max_listed)
    if table is not None and not plottable(table.rows).empty:
        parts.append(fig(busbw_figure(table.rows, table.link_gbps), "collectives"))
    return "\n".join(parts)


def _page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{_e(title)}</title><style>{STYLE}</style>'
            f"</head><body>{body}</body></html>\n")


def report_html(traces: TraceSet, report: AnalysisReport, timeline: TimelineData | None = None,
                width_px: int = DEFAULT_WIDTH_PX) -> str:
    """The self-contained HTML report of one analyzed trace set."""
    fig = _Figures()
    data = timeline if timeline is not None else report_timeline(traces, report)
    label = report.label or "trace set"
    doc = report.to_dict()
    notes = list(report.notes) + [f"rank {m.rank}: {n}" for m in report.ranks for n in dict.fromkeys(m.notes)]
    body = [f"<h1>overlapscope — {_e(label)}</h1>",
            f'<p class="muted">{_e(report.fmt)} · {len(report.ranks)} rank(s) · {data.n_activities:,} GPU activities'
            f" · sources: {_e(', '.join(report.sources))}</p>",
            "<h2>Metrics</h2>", html_table([n for n, _ in RANK_COLUMNS], rank_rows(doc)),
            fig(overview_bars([(label, report)]), "overview"),
            "<h2>Per iteration</h2>", fig(iteration_figure([(label, report)]), "iterations"),
            f"<h2>Findings ({len(report.findings or [])})</h2>", findings_html(report),
            "<h2>Critical path</h2>", _critical_html(doc, fig),
            "<h2>Blocking host syncs</h2>", _syncs_html(doc),
            "<h2>Cross-rank</h2>", _cross_rank_html(report, doc, fig),
            "<h2>Collectives: size and bandwidth</h2>", _collectives_html(report, doc, fig),
            "<h2>Timeline</h2>",
            '<p class="muted">Whole trace at the app\'s default level of detail: intervals closer than one pixel '
            "are merged (hover shows how many). Drag to zoom; for every single kernel use the Perfetto export.</p>",
            fig(timeline_of([data], width_px=width_px), "timeline")]
    if notes:
        body += ["<h2>Notes</h2><ul>", *(f"<li>{_e(n)}</li>" for n in notes), "</ul>"]
    return _page(f"overlapscope — {label}", "\n".join(body))


def diff_html(d: TraceDiff, sides: Sequence[tuple[TraceSet, AnalysisReport]],
              width_px: int = DEFAULT_WIDTH_PX) -> str:
    """The self-contained HTML report of a diff: verdict, tables, findings, both timelines on one x axis."""
    fig = _Figures()
    (ta, ra), (tb, rb) = sides
    datas = [report_timeline(ta, ra, d.labels[0]), report_timeline(tb, rb, d.labels[1])]
    mh, mrows = ["metric", d.labels[0], d.labels[1], "Δ", "Δ%"], diff_tables.metric_rows(d.aggregate, markup=False)
    rh, rrows = diff_tables.rank_rows(d, markup=False)
    kh, krows = diff_tables.kernel_rows(d, top=25)
    ch, crows = diff_tables.collective_rows(d)
    one_side = []
    for key, label in (("only_a", d.labels[0]), ("only_b", d.labels[1])):
        items = d.findings.get(key) or []
        one_side.append(f"<h3>Only in {_e(label)}</h3>" + ("<ul>" + "".join(
            f"<li><code>{_e(f.get('id'))}</code> [{_e(f.get('severity', ''))}] {_e(f.get('title', ''))}</li>"
            for f in items) + "</ul>" if items else "<p>none</p>"))
    al = d.alignment
    body = [f"<h1>overlapscope diff — A: {_e(d.labels[0])} vs B: {_e(d.labels[1])}</h1>",
            f'<p class="verdict">{_e(d.verdict)}</p>',
            f"<h2>Metrics ({_e(d.aggregation)})</h2>", html_table(mh, mrows),
            "<h2>Per rank</h2>", html_table(rh, rrows),
            fig(overview_bars([(d.labels[0], ra), (d.labels[1], rb)]), "overview"),
            "<h2>Per iteration</h2>", fig(iteration_figure([(d.labels[0], ra), (d.labels[1], rb)]), "iterations"),
            "<h2>Findings on one side only</h2>", *one_side,
            "<h2>Kernels that changed most</h2>", html_table(kh, krows, text_cols=(0, 1)),
            "<h2>Collectives: median bus bandwidth per operation and size</h2>",
            html_table(ch, crows, text_cols=(0, 1)) if crows else '<p class="muted">No communication recognised.</p>',
            "<h2>Both timelines, aligned at one iteration</h2>",
            f'<p class="muted">Aligned at {_e(al.get("how", ""))}: A step {_e(al.get("step_a"))}, B step '
            f'{_e(al.get("step_b"))}; one shared x axis (zooming one zooms both).</p>',
            fig(timeline_of(datas, diff_windows(d, datas), width_px=width_px), "timeline"),
            f"<h2>Findings of {_e(d.labels[0])}</h2>", findings_html(ra),
            f"<h2>Findings of {_e(d.labels[1])}</h2>", findings_html(rb)]
    if d.notes:
        body += ["<h2>Notes</h2><ul>", *(f"<li>{_e(n)}</li>" for n in d.notes), "</ul>"]
    return _page(f"overlapscope diff — {d.labels[0]} vs {d.labels[1]}", "\n".join(body))
