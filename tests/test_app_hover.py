"""Hover on every kernel at every zoom (viz/hover.py): every bin of a lane that an activity covers has a hover
point naming the activity that covers most of it, at the whole trace, one step and a window inside one kernel.

Hand-made lanes whose answers are worked out here, and the bundled ag-gemm-nsys run (not tuned to).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from analyzers.io.load import load_traces
from analyzers.timeline.model import TraceSet
from tests.synth import COMM, GEMM, rank_trace
from viz.figures import timeline_figure
from viz.hover import HOVER_BIN_PX, hover_trace
from viz.timeline import CODES, N_CODES, lod_for_windows, prepare_timeline

from .conftest import ROOT


def _one(ts: TraceSet, lo: int, hi: int, width_px: int):
    d = prepare_timeline(ts)
    v = lod_for_windows([d], [(lo, lo, hi)], width_px=width_px)[0]
    return d, v, hover_trace(v, width_px, len(d.lanes) - 1)


def test_hand_made_lane_every_bin_names_the_kernel_that_covers_most_of_it() -> None:
    # stream 7: GEMM 0..1000; stream 20: COMM 400..1200. 1200 ns over 120 px = 30 bins of 40 ns.
    ts = TraceSet(ranks={0: rank_trace([(0, 1000, 7, GEMM), (400, 1200, 20, COMM)])}, label="t", fmt="synthetic")
    d, v, h = _one(ts, 0, 1200, 120)
    bin_ns = 1200 / (120 // HOVER_BIN_PX)
    lane_of = {int(s): int(ln) for s, ln in zip(d.lanes["stream"], d.lanes["lane"], strict=True) if s >= 0}
    top = len(d.lanes) - 1
    x_ns = np.asarray(h.x, dtype=float) * 1e6
    y = np.asarray(h.y, dtype=int)
    gemm = x_ns[y == top - lane_of[7]]
    comm = x_ns[y == top - lane_of[20]]
    assert len(gemm) == 1000 / bin_ns == 25 and len(comm) == 800 / bin_ns == 20  # every covered bin, no other
    assert np.allclose(np.diff(gemm), bin_ns) and np.isclose(comm.min(), 400 + bin_ns / 2)
    assert all(GEMM[:20] in t for t, yy in zip(h.text, y, strict=True) if yy == top - lane_of[7])
    # zoomed to 120 ns inside the GEMM (30 bins of 4 ns): a point per bin on both lanes, each naming its kernel
    # with the kernel's own length (1000 and 800 ns), not the window's
    _, _, z = _one(ts, 500, 620, 120)
    assert len([t for t in z.text if GEMM[:20] in t and "0.0010 ms long" in t]) == 30
    assert len([t for t in z.text if COMM[:20] in t and "0.0008 ms long" in t]) == 30


def test_bundled_run_hover_covers_every_busy_bin_at_every_zoom() -> None:
    run = ROOT / "sample_traces" / "ag-gemm-nsys" / "sync-before-loop"
    ts = load_traces(sorted(p for p in run.iterdir() if p.name != "manifest.json"), label="nsys")
    d = prepare_timeline(ts)
    mid = d.steps.iloc[len(d.steps) // 2]
    kern = d.groups % N_CODES < CODES.index("overlap")
    long_k = int(np.argmax(np.where(kern, d.ends - d.starts, 0)))
    for lo, hi in ((d.t_min, d.t_max), (int(mid["start_ns"]), int(mid["end_ns"])),
                   (int(d.starts[long_k]) + 1000, int(d.starts[long_k]) + 3000)):
        v = lod_for_windows([d], [(lo, lo, hi)], width_px=1600)[0]
        h = hover_trace(v, 1600, len(d.lanes) - 1)
        n_bins = 1600 // HOVER_BIN_PX
        bin_ns = max(1.0, (hi - lo) / n_bins)
        top = len(d.lanes) - 1
        want = set()
        sel = np.flatnonzero(kern & (d.ends > lo) & (d.starts < hi))
        for i in sel:  # every (lane, bin) some kernel covers, by a plain loop
            lane = int(d.groups[i] // N_CODES)
            b0 = int((max(d.starts[i], lo) - lo) // bin_ns)
            b1 = int((min(d.ends[i], hi) - 1 - lo) // bin_ns)
            want |= {(top - lane, min(b, n_bins - 1)) for b in range(b0, b1 + 1)}
        got = {(int(yy), int(round((xx * 1e6 + v.origin_ns - lo) / bin_ns - 0.5)))
               for xx, yy in zip(np.asarray(h.x, dtype=float), h.y, strict=True)}
        assert got == want, (lo, hi, len(got), len(want))
    fig = timeline_figure([v], width_px=1600)
    assert [t for t in fig.data if t.name == "hover"], "the figure carries the hover layer"


def test_payload_stays_small(tmp_path: Path) -> None:
    run = ROOT / "sample_traces" / "ag-gemm" / "tuned"
    d = prepare_timeline(load_traces(sorted(run.glob("rank*.json.gz")), label="tuned"))
    v = lod_for_windows([d], [(d.t_min, d.t_min, d.t_max)], width_px=1600)[0]
    h = hover_trace(v, 1600, len(d.lanes) - 1)
    assert len(h.x) <= 12_000 and len(h.to_plotly_json()["text"]) == len(h.x)
