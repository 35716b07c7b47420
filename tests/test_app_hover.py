"""Hover on every kernel at every zoom (viz/hover.py): each lane is an invisible heatmap row whose cells are its
activities, so the mouse anywhere over a kernel names it, at any zoom the browser makes on its own; only runs of
neighbouring sub-pixel activities share a cell, which says how many it holds.

Hand-made lanes whose answers are worked out here, and the bundled ag-gemm-nsys and gemm-rs runs (not tuned to).
The lookup `_hover_at` is plotly's own for a heatmap of bricks: the cell whose edges hold x, none on a gap.
"""

from __future__ import annotations

import numpy as np
import pytest

from analyzers.io.load import load_traces
from analyzers.timeline.model import TraceSet
from tests.synth import COMM, GEMM, rank_trace
from viz.figures import timeline_figure
from viz.hover import MAX_CELLS, hover_cells, hover_traces
from viz.timeline import CODE, N_CODES, lod_for_windows, prepare_timeline

from .conftest import ROOT


def _traces(ts: TraceSet, lo: int, hi: int, width_px: int):
    d = prepare_timeline(ts)
    v = lod_for_windows([d], [(lo, lo, hi)], width_px=width_px)[0]
    return d, v, hover_traces(v, width_px, len(d.lanes) - 1)


def _hover_at(traces, x_ms: float, y: float) -> str | None:
    """The tooltip plotly shows at (x, y): the row whose y edges hold y, the brick whose x edges hold x."""
    for h in traces:
        if h.y[0] <= y < h.y[1]:
            edges = np.asarray(h.x, dtype=float)
            i = int(np.searchsorted(edges, x_ms, side="right")) - 1
            if 0 <= i < len(edges) - 1 and not np.isnan(np.asarray(h.z)[0][i]):
                return str(np.asarray(h.text)[0][i])
    return None


def _lane_y(d, stream: int) -> int:
    lane = int(d.lanes.loc[d.lanes["stream"] == stream, "lane"].iloc[0])
    return len(d.lanes) - 1 - lane


def test_hand_made_lanes_answer_anywhere_on_a_kernel_and_nowhere_else() -> None:
    # stream 7: GEMM 0..1000, then four 2 ns GEMMs 1300..1308 a ns apart, then GEMM 1400..2000;
    # stream 20: COMM 400..1200. 2000 ns over 200 px: a pixel is 10 ns.
    ts = TraceSet(ranks={0: rank_trace([(0, 1000, 7, GEMM), (1300, 1302, 7, GEMM), (1302, 1304, 7, GEMM),
                                        (1304, 1306, 7, GEMM), (1306, 1308, 7, GEMM), (1400, 2000, 7, GEMM),
                                        (400, 1200, 20, COMM)])}, label="t", fmt="synthetic")
    d, v, h = _traces(ts, 0, 2000, 200)
    gemm_y, comm_y = _lane_y(d, 7), _lane_y(d, 20)
    for x_ns in (1, 500, 999):  # anywhere on the first GEMM, its edges too
        assert GEMM[:30] in _hover_at(h, x_ns / 1e6, gemm_y) and "0.0010 ms long" in _hover_at(h, x_ns / 1e6, gemm_y)
    assert "0.000600 ms long, at 0.001400 ms" in _hover_at(h, 1700 / 1e6, gemm_y)
    assert _hover_at(h, 1100 / 1e6, gemm_y) is None and _hover_at(h, 1350 / 1e6, gemm_y) is None  # gaps
    merged = _hover_at(h, 1304 / 1e6, gemm_y)  # the four sub-pixel GEMMs: one cell that says so
    assert merged.startswith("4 activities under a pixel") and "busy 100% of 0.000008 ms" in merged
    assert COMM[:30] in _hover_at(h, 800 / 1e6, comm_y) and _hover_at(h, 300 / 1e6, comm_y) is None
    band_y = len(d.lanes) - 1  # lane 0: overlap 400..1000, then exposed communication 1000..1200
    assert _hover_at(h, 700 / 1e6, band_y).startswith("overlap") and "0.000600 ms long" in _hover_at(h, 700 / 1e6,
                                                                                                 band_y)
    assert _hover_at(h, 1100 / 1e6, band_y).startswith("exposed communication")
    cells = hover_cells(v, 200)
    assert sorted(cells.count.tolist()) == [1, 1, 1, 1, 1, 4]  # 2 bands, 2 long GEMMs, the merged 4, the COMM
    # drawn at 2000 px (a pixel is 1 ns) the four 2 ns GEMMs are each their own cell, named
    _, _, fine = _traces(ts, 0, 2000, 2000)
    assert "0.000002 ms long, at 0.001304 ms" in _hover_at(fine, 1305 / 1e6, gemm_y)


def test_overlapping_activities_of_one_lane_share_it_without_hiding_each_other() -> None:
    # two kernels on one stream that overlap in time (as a trace can hold): the later one starts where the
    # first ends; one wholly inside another adds no cell, the outer one answers there
    ts = TraceSet(ranks={0: rank_trace([(0, 600, 7, GEMM), (400, 1000, 7, COMM), (100, 200, 7, COMM)])},
                  label="t", fmt="synthetic")
    d, v, h = _traces(ts, 0, 1000, 100)
    y = _lane_y(d, 7)
    assert GEMM[:30] in _hover_at(h, 150 / 1e6, y) and GEMM[:30] in _hover_at(h, 500 / 1e6, y)
    assert COMM[:30] in _hover_at(h, 700 / 1e6, y) and "0.000600 ms long, at 0.000400 ms" in _hover_at(h, 700 / 1e6, y)
    lane = int(d.lanes.loc[d.lanes["stream"] == 7, "lane"].iloc[0])
    cells = hover_cells(v, 100)
    mine = cells.lane == lane
    assert cells.start[mine].tolist() == [0, 600] and cells.end[mine].tolist() == [600, 1000]


@pytest.mark.parametrize("run", ["ag-gemm-nsys/sync-before-loop", "gemm-rs/ring"])
def test_bundled_runs_every_kernel_answers_at_its_middle_at_every_zoom(run: str) -> None:
    folder = ROOT / "sample_traces" / run
    ts = load_traces(sorted(p for p in folder.iterdir() if p.name != "manifest.json"), label=run)
    d = prepare_timeline(ts)
    mid = d.steps.iloc[len(d.steps) // 2]
    kern = d.groups % N_CODES < CODE["overlap"]
    long_k = int(np.argmax(np.where(kern, d.ends - d.starts, 0)))
    top = len(d.lanes) - 1
    for lo, hi in ((d.t_min, d.t_max), (int(mid["start_ns"]), int(mid["end_ns"])),
                   (int(d.starts[long_k]) + 1000, int(d.starts[long_k]) + 3000)):
        v = lod_for_windows([d], [(lo, lo, hi)], width_px=1600)[0]
        h = hover_traces(v, 1600, top)
        pixel = (hi - lo) / 1600
        sel = np.flatnonzero(kern & (d.ends > lo) & (d.starts < hi))
        named = 0
        for i in sel:  # a plain loop: the middle of each kernel's visible part has a tooltip on its lane
            a, b = max(int(d.starts[i]), lo), min(int(d.ends[i]), hi)
            if b <= a:
                continue
            text = _hover_at(h, ((a + b) / 2 - lo) / 1e6, top - int(d.groups[i] // N_CODES))
            assert text is not None, (run, lo, hi, i)
            if b - a >= pixel and d.name_list[d.name_idx[i]][:40] in text and "under a pixel" not in text:
                named += 1
        wide = sum(1 for i in sel if min(d.ends[i], hi) - max(d.starts[i], lo) >= pixel)
        assert named >= 0.9 * wide, (run, lo, hi, named, wide)  # a kernel wider than a pixel is its own cell
    fig = timeline_figure([v], width_px=1600)
    assert [t for t in fig.data if t.type == "heatmap" and t.name == "hover"], "the figure carries the hover rows"
    assert all(t.hoverinfo == "skip" for t in fig.data if t.type == "scattergl" and t.mode == "lines")


def test_cells_stay_within_their_budget() -> None:
    run = ROOT / "sample_traces" / "ag-gemm" / "tuned"
    d = prepare_timeline(load_traces(sorted(run.glob("rank*.json.gz")), label="tuned"))
    v = lod_for_windows([d], [(d.t_min, d.t_min, d.t_max)], width_px=100_000)[0]
    free = hover_cells(v, 100_000)
    tight = hover_cells(v, 100_000, max_cells=40)
    assert len(free) > 40 >= len(tight) and tight.merge_px_ns > free.merge_px_ns
    assert int(tight.count.sum()) == int(free.count.sum())  # merged, never dropped
    assert len(hover_cells(v, 1600)) <= MAX_CELLS
