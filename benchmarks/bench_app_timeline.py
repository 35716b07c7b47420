"""The dashboard's Timeline on a 1M-kernel trace set: server time to first paint, payload, browser paint.

The trace set is a real one made large: the two ranks of the public HTA trace_filter job
(Kineto, NCCL send/recv on two streams next to compute, copy and memset streams) tiled in
time until each rank holds >= 500,000 GPU activities; kernel names, streams, launches and
ProfilerStep ranges are the real ones, shifted (correlation ids and step numbers too).

Measured, in this order:
  1. prepare_timeline: the one-time flattening the app caches per trace set;
  2. first paint, server side: LOD + figure + JSON for the Timeline's default view (one
     step) and for the worst case (the whole trace, 1M kernels in the window), with the
     payload size Streamlit would send (plotly.io.to_json);
  3. with --browser: the real app (`streamlit run app/main.py`) on the same set written to
     Kineto JSON files, Chromium opening /timeline; first paint = navigation until the chart's
     WebGL canvas is drawn, cold (parse included) and warm (a new session, parse cached).

usage: python benchmarks/bench_app_timeline.py [--ranks-kernels 500000] [--repeat 5] [--browser]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from analyzers.io.load import load_traces  # noqa: E402
from analyzers.timeline.model import NameTable, RankTrace, TraceSet  # noqa: E402
from viz.figures import figure_payload_bytes, timeline_figure  # noqa: E402
from viz.lod import DEFAULT_MAX_SEGMENTS, DEFAULT_WIDTH_PX  # noqa: E402
from viz.timeline import lod_for_windows, prepare_timeline  # noqa: E402

SOURCE = ROOT / "tests" / "data" / "public" / "hta"
PAIR = ("trace_filter_sampled_rank-0.json.gz", "trace_filter_sampled_rank-1.json.gz")
STEP_PREFIX = "ProfilerStep#"
PAYLOAD_LIMIT = 10 * 1024 * 1024


# --------------------------------------------------------------------------- the 1M-kernel set


def _tile_table(df: pd.DataFrame, copies: int, shift: int, corr_shift: int) -> pd.DataFrame:
    """The table repeated `copies` times, copy k shifted by k*shift ns (and k*corr_shift ids)."""
    n = len(df)
    k = np.repeat(np.arange(copies, dtype=np.int64), n)
    out = {}
    for c in df.columns:
        col = df[c]
        if isinstance(col.dtype, pd.CategoricalDtype):
            out[c] = pd.Categorical.from_codes(np.tile(col.cat.codes.to_numpy(), copies), col.cat.categories)
        else:
            out[c] = np.tile(col.to_numpy(), copies)
    for c in ("start_ns", "end_ns"):
        if c in out:
            out[c] = out[c] + k * shift
    if "correlation" in out:
        corr = out["correlation"]
        out["correlation"] = np.where(corr >= 0, corr + k * corr_shift, corr)
    return pd.DataFrame(out)


def span_ns(t: RankTrace) -> int:
    tables = [x for x in (t.gpu, t.runtime, t.host_ops) if len(x)]
    return max(int(x["end_ns"].max()) for x in tables) - min(int(x["start_ns"].min()) for x in tables)


def tile_rank(t: RankTrace, copies: int, shift: int) -> RankTrace:
    """One rank's trace repeated every `shift` ns; ProfilerStep numbers continue across copies.

    All ranks use one shift, so copy k of every rank lines up (the ranks' clocks stay shared).
    """
    tables = [t.gpu, t.runtime, t.host_ops]
    corr_shift = 1 + max(int(x["correlation"].max()) for x in tables if len(x))
    names = NameTable(list(t.names.names))
    host = _tile_table(t.host_ops, copies, shift, corr_shift)
    # Renumber ProfilerStep#N per copy: few rows (steps per copy), so a loop over them is fine.
    step_ids = {i: int(n[len(STEP_PREFIX):]) for i, n in enumerate(t.names.names)
                if n.startswith(STEP_PREFIX) and n[len(STEP_PREFIX):].isdigit()}
    if step_ids:
        n_steps = max(step_ids.values()) - min(step_ids.values()) + 1
        k = np.repeat(np.arange(copies), len(t.host_ops))
        is_step = np.isin(host["name_id"].to_numpy(), list(step_ids))
        ids = host["name_id"].to_numpy().copy()
        for row in np.flatnonzero(is_step):
            step = step_ids[int(ids[row])] + int(k[row]) * n_steps
            ids[row] = names.intern(f"{STEP_PREFIX}{step}")
        host["name_id"] = ids.astype(np.int32)
    return RankTrace(rank=t.rank, source=f"{t.source} x{copies}", fmt=t.fmt, names=names,
                     gpu=_tile_table(t.gpu, copies, shift, corr_shift),
                     runtime=_tile_table(t.runtime, copies, shift, corr_shift), host_ops=host,
                     world_size=t.world_size, rank_source=t.rank_source, meta=dict(t.meta))


def million_kernel_set(per_rank: int) -> TraceSet:
    base = load_traces([SOURCE / n for n in PAIR], label="trace_filter")
    shift = max(span_ns(t) for t in base) + 1_000_000
    copies = max(-(-per_rank // len(t.gpu)) for t in base)
    ranks = {r: tile_rank(t, copies, shift) for r, t in base.ranks.items()}
    return TraceSet(ranks=ranks, label=f"trace_filter tiled to {per_rank:,} per rank", fmt=base.fmt,
                    world_size=base.world_size)


# --------------------------------------------------------------------------- server side


def first_paint_server(data, window: tuple[int, int, int], width_px: int = DEFAULT_WIDTH_PX
                       ) -> tuple[float, int, int]:
    """(seconds, segments, payload bytes): LOD + figure + the JSON Streamlit sends."""
    t = time.perf_counter()
    segs = lod_for_windows([data], [window], width_px=width_px, max_segments=DEFAULT_MAX_SEGMENTS)
    fig = timeline_figure(segs, width_px=width_px)
    payload = figure_payload_bytes(fig)
    return time.perf_counter() - t, sum(len(s.segments) for s in segs), payload


def median_of(fn, repeat: int):
    runs = [fn() for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), runs[0]


# --------------------------------------------------------------------------- browser


def write_kineto(t: RankTrace, path: Path) -> None:
    """A compact Kineto JSON (.json.gz) of the GPU activities, their launches and the step ranges.

    Times are written as µs with three decimals, so the loader reads back exact nanoseconds.
    """
    names = np.asarray(t.names.names, dtype=object)
    gpu_cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}

    def events(df: pd.DataFrame, cat: pd.Series | str, args: dict[str, pd.Series]) -> list[str]:
        ts = pd.Series(df["start_ns"].to_numpy() / 1000.0).map("{:.3f}".format)
        dur = pd.Series((df["end_ns"] - df["start_ns"]).to_numpy() / 1000.0).map("{:.3f}".format)
        nm = pd.Series(names[df["name_id"].to_numpy()]).map(json.dumps)
        text = pd.Series([""] * len(df))
        for k, v in args.items():
            text = text + f',"{k}":' + pd.Series(np.asarray(v)).astype(str)
        cat_s = cat if isinstance(cat, str) else cat.reset_index(drop=True)
        return ('{"ph":"X","cat":"' + cat_s + '","name":' + nm + ',"pid":0,"tid":0,"ts":' + ts + ',"dur":' + dur
                + ',"args":{"External id":0' + text + "}}").tolist()

    gpu = t.gpu
    steps = t.host_ops[pd.Series(names[t.host_ops["name_id"].to_numpy()]).str.startswith(STEP_PREFIX).to_numpy()]
    lines = (events(gpu, gpu["kind"].astype(str).map(gpu_cat), {
        "device": gpu["device"], "stream": gpu["stream"], "correlation": gpu["correlation"]})
        + events(t.runtime, "cuda_runtime", {"correlation": t.runtime["correlation"]})
        + events(steps, "user_annotation", {}))
    head = json.dumps({"distributedInfo": {"rank": t.rank, "world_size": 2, "backend": "nccl"}})[:-1]
    with gzip.open(path, "wt", compresslevel=1) as fh:
        fh.write(head + ', "traceEvents": [\n')
        fh.write(",\n".join(lines))
        fh.write("\n]}\n")


DRAWN_JS = ("() => { const p = document.querySelector('[data-testid=\"stPlotlyChart\"] .js-plotly-plot');"
            " return !document.querySelector('[data-testid=\"stStatusWidget\"]') && p && p._fullData"
            " && p._fullData.length > 0 && p.querySelector('canvas'); }")


def browser_first_paint(files: list[Path], repeat: int) -> dict[str, object]:
    """Navigation -> drawn chart on /timeline of the real app: once cold, then `repeat` warm sessions."""
    from playwright.sync_api import sync_playwright

    from tests.test_app_browser import free_port, launch_browser, start_app, stop_app

    env = dict(os.environ)
    env.update({"PYTHONPATH": str(ROOT), "OVERLAPSCOPE_SAMPLES": str(files[0].parent / "no-samples")})
    port = free_port()
    proc = start_app(port, env, files[0].parent / "streamlit.log", paths=[str(f) for f in files])
    paints: list[float] = []
    frames: list[int] = []
    whole_s = float("nan")
    try:
        with sync_playwright() as p:
            browser = launch_browser(p)
            try:
                for i in range(repeat + 1):
                    ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
                    page = ctx.new_page()
                    page.on("websocket", lambda ws: ws.on(
                        "framereceived", lambda f: frames.append(len(f) if f is not None else 0)))
                    t = time.perf_counter()
                    page.goto(f"http://127.0.0.1:{port}/timeline", wait_until="domcontentloaded")
                    page.wait_for_function(DRAWN_JS, timeout=900_000, polling=50)
                    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
                    paints.append(time.perf_counter() - t)
                    if i == repeat:
                        page.screenshot(path=str(files[0].parent / "bench_timeline.png"))
                        # re-aggregation: switch the step selector to the whole trace
                        caption = page.get_by_text("segments drawn for")
                        before = caption.inner_text()
                        t = time.perf_counter()
                        page.locator('[data-testid="stSelectbox"]').first.click()
                        page.get_by_role("option", name="whole trace").click()
                        page.wait_for_function(
                            "old => [...document.querySelectorAll('[data-testid=\"stCaptionContainer\"]')].some("
                            "c => c.innerText.includes('segments drawn for') && c.innerText !== old)", arg=before,
                            timeout=600_000, polling=50)
                        page.wait_for_function(DRAWN_JS, timeout=600_000, polling=50)
                        page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
                        whole_s = time.perf_counter() - t
                        page.screenshot(path=str(files[0].parent / "bench_timeline_whole.png"))
                    ctx.close()
            finally:
                browser.close()
    finally:
        stop_app(proc)
    return {"cold_s": paints[0], "warm_s": paints[1:], "largest_ws_frame_bytes": max(frames, default=0),
            "whole_s": whole_s}


# --------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks-kernels", type=int, default=500_000, help="GPU activities per rank (2 ranks)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--browser", action="store_true", help="also the real app in Chromium")
    ap.add_argument("--data", type=Path, default=ROOT / "benchmarks" / "data" / "app_timeline")
    args = ap.parse_args()

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"numpy {np.__version__}, pandas {pd.__version__}")
    t = time.perf_counter()
    ts = million_kernel_set(args.ranks_kernels)
    n_gpu = sum(len(r.gpu) for r in ts)
    lanes = sum(r.gpu.groupby(["device", "stream"]).ngroups for r in ts)
    print(f"trace set: {len(ts)} ranks, {n_gpu:,} GPU activities, {lanes} stream lanes "
          f"(built in {time.perf_counter() - t:.1f} s)")

    t = time.perf_counter()
    no_syncs = pd.DataFrame({c: [] for c in ("rank", "start_ns", "end_ns", "name", "blocked_ns", "gpu_idle_ns",
                                             "caller")})
    data = prepare_timeline(ts, syncs=no_syncs)
    print(f"prepare_timeline (once per trace set, cached by the app): {time.perf_counter() - t:.2f} s")

    steps = data.steps["step"].tolist()
    mid = steps[len(steps) // 2]
    s0, s1 = data.step_window(mid)
    whole = (data.t_min, data.t_min, data.t_max)
    views = {"default view (one step, as the page opens)": (s0, s0, s1, DEFAULT_WIDTH_PX),
             f"whole trace (1M kernels in the window), {DEFAULT_WIDTH_PX} px": (*whole, DEFAULT_WIDTH_PX),
             "whole trace at 8000 px (the page's maximum detail)": (*whole, 8000),
             "whole trace at 500000 px (stress: the segment budget must bind)": (*whole, 500_000)}
    ok = True
    for name, (*window, width) in views.items():
        med, (_, segs, payload) = median_of(lambda w=tuple(window), px=width: first_paint_server(data, w, px),
                                            args.repeat)
        n_in = int(((data.ends > window[1]) & (data.starts < window[2])).sum())
        print(f"{name}: {n_in:,} intervals in the window -> {segs:,} segments, payload {payload / 1e6:.2f} MB, "
              f"server first-paint work {med * 1000:.0f} ms (median of {args.repeat})")
        ok &= payload < PAYLOAD_LIMIT

    if args.browser:
        args.data.mkdir(parents=True, exist_ok=True)
        files = [args.data / f"rank{r}.json.gz" for r in ts.rank_ids()]
        if not all(f.exists() for f in files):
            t = time.perf_counter()
            for r, f in zip(ts.rank_ids(), files, strict=True):
                write_kineto(ts.ranks[r], f)
            print(f"wrote {', '.join(f'{f.name} {f.stat().st_size / 1e6:.0f} MB' for f in files)} "
                  f"in {time.perf_counter() - t:.0f} s")
        small = args.data / "baseline"
        small.mkdir(exist_ok=True)
        base = load_traces([SOURCE / n for n in PAIR])
        small_files = [small / f"rank{r}.json.gz" for r in base.rank_ids()]
        for r, f in zip(base.rank_ids(), small_files, strict=True):
            write_kineto(base.ranks[r], f)
        for name, fs in (("the original 2-rank trace (2,358 GPU activities), for the fixed cost", small_files),
                         (f"the {n_gpu:,}-activity set", files)):
            res = browser_first_paint(fs, args.repeat)
            warm = list(res["warm_s"])
            print(f"Chromium first paint of /timeline, {name}: cold (parse + analyses + figure) "
                  f"{res['cold_s']:.1f} s; warm (new session, parse cached) median {statistics.median(warm):.2f} s "
                  f"of {len(warm)} ({', '.join(f'{x:.2f}' for x in warm)}); largest websocket frame "
                  f"{(res['largest_ws_frame_bytes'] or 0) / 1e6:.2f} MB; switching the step selector to the "
                  f"whole trace: {res['whole_s']:.2f} s to the redrawn chart")
    print("payload under 10 MB:", "yes" if ok else "NO")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
