"""In Chromium, two more review points on runs no other browser test was written against: three 4-rank sample
sets (sample_traces/four-gpus/), the 2-rank host-sync run and two public traces with syncs closer together than a
marker on the whole trace (tests/data/public/), given to `overlapscope app`.

Point 5: the Overview's first screen holds, for each run, its top finding with its price and the step predicted
with every fix at once, read from the decision grid's accessible table (the cells Streamlit's data grid writes
into the page beside its canvas); the host-sync run's critical-path cause is tied to its headline finding.
Point 8: on the whole-trace Timeline, a lane's sync markers stand apart (or one marker says how many it stands
for) and the critical-path line lies beside the communication bars, not over them, read from the plotted figure.
One server for the module (tests/test_app_browser_points.py's start-up); each test opens its own browser.
"""

from __future__ import annotations

import signal
import urllib.parse
from typing import TYPE_CHECKING

import pytest

from analyzers.graph.analysis import whatif
from analyzers.graph.fixes import FIX_OF_FINDING, Fix
from analyzers.io.load import load_traces
from analyzers.report import analyze

from .app_server import start_app
from .conftest import ROOT
from .test_app_browser_points import IDLE_JS, _open

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = pytest.mark.browser
SAMPLES = ROOT / "sample_traces"
LABELS = ["four-gpus/fsdp", "four-gpus/symm-mem", "four-gpus/gemm-rs", "ag-gemm/host-sync"]
# runs with syncs closer than a marker on the whole trace: a 2 x H100 nsys export (harmful and harmless syncs on one
# lane) and one rank of an 8-rank Kineto job (61 syncs)
DENSE = {"h100_2gpu_1s.sqlite.gz": ROOT / "tests" / "data" / "public" / "nsys" / "h100_2gpu_1s.sqlite.gz",
         "trace_diff_control.json.gz": ROOT / "tests" / "data" / "public" / "hta" / "trace_diff_control.json.gz"}
WIDTH, HEIGHT = 1280, 800
GRID_JS = """() => [...document.querySelectorAll('[data-testid="stDataFrame"]')].map(df => {
  const t = df.querySelector('table[role="grid"]'), r = df.getBoundingClientRect();
  return t ? {head: [...t.querySelectorAll('thead th')].map(th => th.textContent.trim()),
              rows: [...t.querySelectorAll('tbody tr')].map(tr => [...tr.querySelectorAll('td')].map(
                td => td.textContent.trim())), top: r.top, bottom: r.bottom} : null; }).filter(Boolean)"""
# The plotted timeline in px: per marker trace its points and size, per line trace its name and y values, and
# the axes' scales (px per ms, px per lane).
FIGURE_JS = """() => { const gd = document.querySelector('[data-testid="stPlotlyChart"] .js-plotly-plot');
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
  const xpx = (v) => (v - xa.range[0]) / (xa.range[1] - xa.range[0]) * xa._length;
  return {pxPerLane: ya._length / (ya.range[1] - ya.range[0]),
    traces: gd._fullData.filter(t => t.xaxis === 'x' && t.yaxis === 'y').map(t => ({name: t.name, mode: t.mode,
      size: t.marker ? t.marker.size : null, fill: t.fill, width: t.line ? t.line.width : null,
      merged: t.customdata ? Array.from(t.customdata).map(c => c[2]) : null,
      x: t.x ? Array.from(t.x).map(v => v === null || Number.isNaN(v) ? null : xpx(v)) : [],
      y: t.y ? Array.from(t.y).map(v => v === null || Number.isNaN(v) ? null : v) : []}))}; }"""


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory):
    proc, url = start_app([*(SAMPLES / label for label in LABELS), *DENSE.values()], tmp_path_factory.mktemp("mixed"))
    try:
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f}"


def _expected(label: str) -> tuple[object, str | None, str | None, str]:
    """The run's report, top priced finding, its price and the fix-all prediction, as the decision words them."""
    rep = analyze(load_traces(sorted((SAMPLES / label).glob("rank*.json.gz")), label=label))
    priced = sorted((f for f in rep.findings if f.saving_ns is not None), key=lambda f: -f.saving_ns)
    top = priced[0] if priced else None
    price = None if top is None else (f"saves {_ms(top.saving_ns)} ms per step" if top.saving_ns > 0
                                      else "saves nothing per step")
    fixes = sorted({FIX_OF_FINDING[f.id] for f in rep.findings if f.id in FIX_OF_FINDING})
    fix_all = (f"{_ms(whatif(rep.graph_run, [Fix(f) for f in fixes])['predicted_step_ns'])} ms per step" if fixes
               else "no fix to replay")
    return rep, top.title if top else None, price, fix_all


def test_first_screen_holds_each_runs_top_finding_price_and_fix_all(mixed: str, browser: Browser) -> None:
    page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    page.goto(f"{mixed}/?runs={','.join(LABELS)}", wait_until="domcontentloaded")
    page.wait_for_function("() => document.querySelector('[data-testid=\"stDataFrame\"] table[role=grid] "
                           "tbody tr')", timeout=300_000)
    page.wait_for_function(IDLE_JS, timeout=300_000)
    page.wait_for_timeout(1500)
    grid = page.evaluate(GRID_JS)[0]
    assert grid["bottom"] <= HEIGHT, f"the decision grid ends at {grid['bottom']} px, below the fold"
    head = grid["head"]
    rows = {r[head.index("run")]: dict(zip(head, r, strict=True)) for r in grid["rows"]}
    assert sorted(rows) == sorted(LABELS), rows.keys()
    for label in LABELS:
        _, title, price, fix_all = _expected(label)
        row = rows[label]
        assert row["top finding"] == (title or "no finding"), (label, row)
        if price:
            assert row["top finding's price"].startswith(price), (label, row["top finding's price"], price)
        assert fix_all in row["fix all (replayed step)"], (label, row, fix_all)
    # the host-sync run: its critical path's blocking-sync idle named as its headline finding's idle time
    rep = _expected("ag-gemm/host-sync")[0]
    rank, part = max(rep.critical_path["per_rank"].items(), key=lambda kv: kv[1]["parts"]["sync_idle"])
    syncs = max((f for f in rep.findings if f.id == "host-blocking-sync"), key=lambda f: f.saving_ns or 0)
    infos = [t for t in page.locator('[data-testid="stAlertContentInfo"]').all_inner_texts()
             if t.startswith("ag-gemm/host-sync: Blocking-sync idle")]
    assert len(infos) == 1, page.locator('[data-testid="stAlertContentInfo"]').all_inner_texts()
    assert f"rank {rank}'s critical path ({_ms(part['parts']['sync_idle'])} of " in infos[0]
    assert syncs.title in infos[0] and f"saves {_ms(syncs.saving_ns)} ms per step" in infos[0], infos[0]


def _overlaps(lo: list[float], hi: list[float], a: float, b: float) -> bool:
    return any(x < b and a < y for x, y in zip(lo, hi, strict=True))


@pytest.mark.parametrize("label", ["four-gpus/fsdp", "ag-gemm/host-sync", *DENSE])
def test_whole_trace_sync_markers_stand_apart_and_the_critical_path_is_beside_the_comm_bars(
        mixed: str, label: str, browser: Browser) -> None:
    drawn = ("() => { const g = document.querySelector('[data-testid=\"stPlotlyChart\"] .js-plotly-plot');"
             " return !!(g && g._fullData && g._fullData.some(t => t.name === 'critical path'))"
             " && !document.querySelector('[data-testid=\"stStatusWidget\"]'); }")
    page = _open(browser, f"{mixed}/timeline?runs={urllib.parse.quote(label)}&step=whole", drawn)
    fig = page.evaluate(FIGURE_JS)
    assert page.evaluate("() => document.querySelector('[data-testid=\"stPlotlyChart\"] .js-plotly-plot')"
                         "._fullLayout.annotations.map(a => a.text)").count(label) == 1, "the run asked for"
    traces, lane_px = fig["traces"], fig["pxPerLane"]
    markers = [t for t in traces if t["mode"] == "markers" and "sync" in t["name"]]
    assert markers, "the run's host syncs are marked"
    lanes: dict[float, list[tuple[float, float]]] = {}
    for t in markers:
        for x, y in zip(t["x"], t["y"], strict=True):
            lanes.setdefault(y, []).append((x, t["size"]))
    for y, points in lanes.items():
        points.sort()
        close = [(a, b) for (a, sa), (b, sb) in zip(points, points[1:], strict=False) if b - a < max(sa, sb)]
        assert not close, f"{label}: sync markers on lane y={y} overlap at px {close[:5]}"
    merged = [m for t in markers for m in t["merged"]]
    assert all(m >= 1 for m in merged) and sum(merged) >= len(merged), "each marker says how many it stands for"
    # the critical path's line (2 px) against the communication bars (their line width), in px from lane centres
    comm = [t for t in traces if t["mode"] == "lines" and t["name"] in ("communication", "exposed communication")]
    critical = [t for t in traces if t["name"] == "critical path"]
    assert critical, "the critical path is outlined"
    if label in LABELS:  # the sample runs communicate (the nsys export and the Kineto rank may hold no comm lane)
        assert comm, "the run's communication is drawn"
    bars_lo, bars_hi = [], []
    for t in comm:
        ys = [y for y in t["y"] if y is not None]
        if t["fill"] == "toself":  # the per-pixel mix: each lane's filled sub-lane, from its lowest to highest y
            for lane in {round(y) for y in ys}:
                own = [y for y in ys if round(y) == lane]
                bars_lo.append(min(own) * lane_px)
                bars_hi.append(max(own) * lane_px)
        else:  # a bar is a line of its width along its lane
            bars_lo += [y * lane_px - t["width"] / 2 for y in ys]
            bars_hi += [y * lane_px + t["width"] / 2 for y in ys]
    for t in critical:
        half = t["width"] / 2
        ys = {y for y in t["y"] if y is not None}
        covered = [y for y in ys if _overlaps(bars_lo, bars_hi, y * lane_px - half, y * lane_px + half)]
        assert not covered, f"{label}: the critical-path line at lane y={covered} is drawn over the comm bars"
