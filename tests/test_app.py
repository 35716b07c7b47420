"""The dashboard: level of detail, figure builders, sources and path checks, and every page
under Streamlit's AppTest (loads, shows the metrics and figures the analyzers compute, refuses
bad uploads and paths with a clear message).

The app runs on a small sample set built here from the bundled public traces: a Kineto pair
(two ranks of one job, NCCL send/recv) and an Nsight Systems export of two processes with
blocking host syncs. Expected numbers come from the analyzers, never from literals.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyzers.io.load import load_traces
from analyzers.report import analyze
from analyzers.timeline import intervals as iv
from app import data, uploads
from tests.synth import COMM, GEMM, rank_trace
from viz import labels
from viz.figures import (
    arrival_lateness,
    figure_payload_bytes,
    overview_bars,
    peer_wait_bars,
    skew_heatmap,
    sync_figure,
    timeline_figure,
)
from viz.lod import lod_segments, pixel_ns, sort_for_lod
from viz.mix import needs_mix
from viz.timeline import CODE, N_CODES, lod_for_windows, prepare_timeline

from .conftest import HTA_TRACES, NSYS_TRACES, ROOT

MAIN = str(ROOT / "app" / "main.py")
KINETO_PAIR = ("trace_filter_sampled_rank-0.json.gz", "trace_filter_sampled_rank-1.json.gz")
NSYS_SYNCS = "h100_2gpu_1s.sqlite"
TIMEOUT = 180


# --------------------------------------------------------------------------- fixtures


def make_samples(root: Path) -> Path:
    """A sample_traces-like tree: demo/kineto (HTA pair) and demo/nsys (2 processes, host syncs)."""
    kin = root / "demo" / "kineto"
    nsy = root / "demo" / "nsys"
    kin.mkdir(parents=True, exist_ok=True)
    nsy.mkdir(parents=True, exist_ok=True)
    for name in KINETO_PAIR:
        shutil.copy(HTA_TRACES / name, kin / name)
    shutil.copy(NSYS_TRACES / NSYS_SYNCS, nsy / "ranks.sqlite")
    base = {"status": "ok", "algorithm": "demo", "profiler": "torch", "world_size": 2,
            "params": {"m": 4096, "streams": 2, "check": True}, "timings_ms": {"variant_ms": 1.25},
            "env": {"SECRET_TOKEN": "must-not-show"}}
    (kin / "manifest.json").write_text(json.dumps({
        **base, "variant": "kineto", "variant_help": "two ranks of the HTA trace_filter job",
        "traces": {"0": KINETO_PAIR[0], "1": KINETO_PAIR[1]}}))
    (nsy / "manifest.json").write_text(json.dumps({
        **base, "variant": "nsys", "profiler": "nsys", "traces": {"0": "ranks.sqlite"}}))
    return root


@pytest.fixture(scope="session")
def samples(tmp_path_factory: pytest.TempPathFactory, hta_dir: Path) -> Path:
    return make_samples(tmp_path_factory.mktemp("samples"))


@pytest.fixture()
def app_env(samples: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv(data.ENV_SAMPLES, str(samples))
    monkeypatch.delenv(data.ENV_ALLOWED_ROOTS, raising=False)
    monkeypatch.delenv(data.ENV_APP_PATHS, raising=False)
    monkeypatch.delenv(data.ENV_MAX_UPLOAD_MB, raising=False)
    monkeypatch.setenv(data.ENV_RUNS_DIR, str(tmp_path / "runs"))
    return samples


@pytest.fixture(scope="session")
def sample_sets(samples: Path):
    kin = load_traces([samples / "demo" / "kineto" / n for n in KINETO_PAIR], label="demo/kineto")
    nsy = load_traces([samples / "demo" / "nsys" / "ranks.sqlite"], label="demo/nsys")
    return kin, nsy


# --------------------------------------------------------------------------- level of detail


def test_pixel_ns() -> None:
    assert pixel_ns(0, 1000, 100) == 10
    assert pixel_ns(0, 1001, 100) == 11  # rounds up: never more than width_px pixels
    assert pixel_ns(0, 5, 100) == 1
    with pytest.raises(ValueError):
        pixel_ns(0, 10, 0)


def test_lod_merges_closer_than_threshold_per_group() -> None:
    # group 0: [0,4) [5,10) [12,20) gap 1 and 2 < 3 -> one; [30,31) [31,40) touching -> one
    # group 1: [0,50) and [100,150): gap 50 -> two; never merged with group 0
    s = np.array([0, 5, 12, 30, 31, 0, 100])
    e = np.array([4, 10, 20, 31, 40, 50, 150])
    g = np.array([0, 0, 0, 0, 0, 1, 1])
    seg = lod_segments(s, e, g, 0, 200, min_gap_ns=3)
    assert seg.start.tolist() == [0, 30, 0, 100]
    assert seg.end.tolist() == [20, 40, 50, 150]
    assert seg.group.tolist() == [0, 0, 1, 1]
    assert seg.count.tolist() == [3, 2, 1, 1]
    assert seg.busy.tolist() == [4 + 5 + 8, 1 + 9, 50, 50]
    assert seg.threshold_ns == 3


def test_lod_gap_equal_to_threshold_stays_separate() -> None:
    # [0,10) and [13,20): the gap is 3. "Closer than" the threshold merges, equal does not.
    s, e, g = np.array([0, 13]), np.array([10, 20]), np.zeros(2)
    assert lod_segments(s, e, g, 0, 100, min_gap_ns=3).count.tolist() == [1, 1]
    merged = lod_segments(s, e, g, 0, 100, min_gap_ns=4)
    assert (merged.count.tolist(), merged.busy.tolist(), merged.end.tolist()) == ([2], [17], [20])


def test_lod_overlapping_intervals_busy_counted_once() -> None:
    # [0,10) [2,5) [8,15): union [0,15) = 15, not 10 + 3 + 7
    seg = lod_segments(np.array([0, 2, 8]), np.array([10, 5, 15]), np.zeros(3), 0, 100, min_gap_ns=1)
    assert (seg.start.tolist(), seg.end.tolist(), seg.busy.tolist(), seg.count.tolist()) == ([0], [15], [15], [3])


def test_lod_clips_to_window() -> None:
    s, e = np.array([0, 40, 90, 200]), np.array([20, 60, 120, 210])
    seg = lod_segments(s, e, np.zeros(4), 10, 100, min_gap_ns=1)
    assert seg.start.tolist() == [10, 40, 90]
    assert seg.end.tolist() == [20, 60, 100]
    assert seg.busy.tolist() == [10, 20, 10]
    assert seg.first.tolist() == [0, 1, 2]  # indices into the input, for names


def test_lod_budget_keeps_the_largest_gaps() -> None:
    # gaps 1, 50, 2, 30 within one group; a budget of 3 segments keeps the two largest gaps
    s = np.array([0, 11, 71, 83, 123])
    e = np.array([10, 21, 81, 93, 133])
    seg = lod_segments(s, e, np.zeros(5), 0, 200, min_gap_ns=1, max_segments=3)
    assert len(seg) == 3
    assert seg.start.tolist() == [0, 71, 123]
    assert seg.end.tolist() == [21, 93, 133]
    assert seg.threshold_ns == 3  # just above the largest gap that had to merge (2)


def test_lod_budget_smaller_than_groups_gives_one_segment_per_group() -> None:
    s = np.arange(0, 100, 10)
    seg = lod_segments(s, s + 5, np.repeat([0, 1], 5), 0, 100, min_gap_ns=1, max_segments=1)
    assert seg.group.tolist() == [0, 1]
    assert seg.count.tolist() == [5, 5]


def test_lod_presorted_matches_unsorted_and_union_is_exact() -> None:
    rng = np.random.default_rng(7)
    n = 20_000
    s = rng.integers(0, 10_000_000, n)
    e = s + rng.integers(1, 20_000, n)
    g = rng.integers(0, 12, n)
    a = lod_segments(s, e, g, 1_000_000, 9_000_000, width_px=800)
    order = sort_for_lod(s, e, g)
    b = lod_segments(s[order], e[order], g[order], 1_000_000, 9_000_000, width_px=800, presorted=True)
    for f in ("start", "end", "group", "count", "busy"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    # per group: merged busy time == union length of the clipped intervals (analyzers' algebra)
    for grp in range(12):
        cs, ce = iv.clip(s[g == grp], e[g == grp], 1_000_000, 9_000_000)
        assert int(a.busy[a.group == grp].sum()) == iv.total_length(cs, ce)
    # segments of a group never overlap and are at least a pixel apart
    px = pixel_ns(1_000_000, 9_000_000, 800)
    for grp in range(12):
        m = a.group == grp
        assert np.all(a.start[m][1:] - a.end[m][:-1] >= px)


def test_lod_respects_budget_at_scale() -> None:
    rng = np.random.default_rng(1)
    n = 400_000
    s = np.sort(rng.integers(0, 10**10, n))
    e = s + rng.integers(100, 5_000, n)
    g = rng.integers(0, 40, n)
    seg = lod_segments(s, e, g, width_px=100_000, max_segments=50_000)
    assert 0 < len(seg) <= 50_000
    assert int(seg.count.sum()) == n


def test_lod_empty_and_outside_window() -> None:
    z = np.zeros(0, dtype=np.int64)
    assert len(lod_segments(z, z, z, 0, 10)) == 0
    assert len(lod_segments(np.array([50]), np.array([60]), np.array([0]), 0, 10)) == 0


# --------------------------------------------------------------------------- timeline data and figures


def _synthetic_set():
    from analyzers.timeline.model import TraceSet

    ranks = {}
    for r in (0, 1):
        ranks[r] = rank_trace([
            (0, 100, 7, GEMM), (120, 200, 7, GEMM),
            (50, 150, 20, COMM), (300 + 10 * r, 400, 20, COMM),
        ], rank=r, world_size=2)
    return TraceSet(ranks=ranks, label="synthetic", fmt="synthetic", world_size=2)


def test_prepare_timeline_bands_are_the_metrics_sets() -> None:
    ts = _synthetic_set()
    syncs = pd.DataFrame({"rank": [1], "start_ns": [210], "end_ns": [290], "name": ["cudaStreamSynchronize"],
                          "blocked_ns": [80.0], "gpu_idle_ns": [95.0], "caller": ["aten::item"]})
    d = prepare_timeline(ts, syncs=syncs)
    kinds = d.lanes.groupby("rank")["kind"].apply(list).to_dict()
    assert kinds == {0: ["band", "stream", "stream"], 1: ["band", "sync", "stream", "stream"]}
    lane = d.lanes.set_index(["rank", "kind"])["lane"]
    ov = d.groups == lane[(0, "band")] * N_CODES + CODE["overlap"]
    ex = d.groups == lane[(0, "band")] * N_CODES + CODE["exposed_comm"]
    # rank 0: comm [50,150) [300,400), compute [0,100) [120,200): overlap [50,100) [120,150)
    assert list(zip(d.starts[ov], d.ends[ov], strict=True)) == [(50, 100), (120, 150)]
    assert list(zip(d.starts[ex], d.ends[ex], strict=True)) == [(100, 120), (300, 400)]
    rep = analyze(ts)
    assert int((d.ends[ov] - d.starts[ov]).sum()) == rep.rank(0).overlap_ns
    assert int((d.ends[ex] - d.starts[ex]).sum()) == rep.rank(0).whole.exposed_comm_ns
    sy = d.groups == lane[(1, "sync")] * N_CODES + CODE["host_sync"]
    assert list(zip(d.starts[sy], d.ends[sy], strict=True)) == [(210, 290)]
    assert (d.t_min, d.t_max) == (0, 400)


def test_timeline_figure_two_variants_share_x(sample_sets) -> None:
    kin, nsy = sample_sets
    datas = [prepare_timeline(kin), prepare_timeline(nsy)]
    windows = [(d.t_min, d.t_min, d.t_max) for d in datas]
    segs = lod_for_windows(datas, windows, width_px=1200, max_segments=5_000)
    assert sum(len(s.segments) for s in segs) <= 5_000
    fig = timeline_figure(segs, width_px=1200)
    # one figure, two rows of subplots, the second x axis bound to the first (synchronized zoom)
    assert fig.layout.xaxis2.matches == "x" or fig.layout.xaxis.matches == "x2"
    gl = [t for t in fig.data if t.type == "scattergl"]
    assert gl and all(t.type == "scattergl" or (t.type, t.name) == ("heatmap", "hover") for t in fig.data)
    lines = [t for t in gl if t.mode == "lines" and t.fill != "toself"]
    # every segment is (start, end, NaN): the separators keep one trace per lane and colour; a run
    # whose segments merge intervals is drawn as per-pixel category shares instead (app/mix.py)
    px = max(1, int(max(s.hi_ns - s.lo_ns for s in segs) / 1200))
    plain = [s for s in segs if not needs_mix(s.segments, px)]
    n_points = sum(len(t.x) for t in lines)
    assert n_points == 3 * sum(len(s.segments) for s in plain)
    assert all(np.isnan(np.asarray(t.x, dtype=float)[2::3]).all() for t in lines)
    colours = {t.line.color for t in lines} | {t.fillcolor for t in gl if t.fill == "toself"}
    assert {"#1f77b4", "#ff7f0e"} <= colours  # compute and communication
    assert "#2ca02c" in colours and "#d62728" in colours  # overlap and exposed-comm bands
    markers = [t for t in gl if t.mode == "markers" and t.name != "hover"]  # the sync markers
    merged = sum(float(c[2]) for t in markers for c in t.customdata)  # a marker stands for the syncs at its pixel
    assert markers and merged == len(datas[1].syncs)  # host syncs of the nsys run
    ticks = list(fig.layout.yaxis.ticktext) + list(fig.layout.yaxis2.ticktext)
    assert "rank 0 · overlap / exposed" in ticks and any("host syncs" in t for t in ticks)


def test_timeline_figure_x_is_relative_to_origin() -> None:
    d = prepare_timeline(_synthetic_set(), syncs=pd.DataFrame(
        {c: [] for c in ("rank", "start_ns", "end_ns", "name", "blocked_ns", "gpu_idle_ns", "caller")}))
    segs = lod_for_windows([d], [(100, 100, 400)], width_px=300)
    fig = timeline_figure(segs, width_px=300)
    xs = np.concatenate([np.asarray(t.x, dtype=float) for t in fig.data if t.type == "scattergl" and t.mode == "lines"])
    xs = xs[~np.isnan(xs)]
    assert xs.min() >= 0.0 and xs.max() <= 300 / 1e6 + 1e-9
    assert list(fig.layout.xaxis.range) == [0.0, pytest.approx(300 / 1e6)]


def test_overview_bars_add_up_to_the_span(sample_sets) -> None:
    kin, _ = sample_sets
    rep = analyze(kin)
    fig = overview_bars([("kin", rep)])
    totals = np.sum([np.asarray(t.x, dtype=float) for t in fig.data], axis=0)
    spans = np.array([m.whole.span_ns for m in rep.ranks]) / 1e6
    assert np.allclose(totals, spans)
    assert [t.name for t in fig.data] == ["compute only", "overlapped", "exposed communication", "other busy",
                                          "idle"]


def test_cross_rank_figures() -> None:
    colls = pd.DataFrame({"coll_id": [0, 1], "coll_name": ["AllGather", "AllGather"],
                          "first_start_ns": [1_000, 5_000], "skew_ns": [300, 0],
                          "start_ns_r0": pd.array([1_000, 5_000], dtype="Int64"),
                          "start_ns_r1": pd.array([1_300, pd.NA], dtype="Int64")})
    late = arrival_lateness(colls, [0, 1])
    assert late.loc[0].tolist() == [0.0, 0.0]
    assert late.loc[1, 0] == 300.0 and np.isnan(late.loc[1, 1])
    fig = skew_heatmap(colls, [0, 1])
    assert fig.data[0].type == "heatmap" and list(fig.data[0].x) == ["#0 AllGather", "#1 AllGather"]
    pw = peer_wait_bars(pd.DataFrame({"rank": [0, 1], "wait_ns": [2e6, 0.0], "transfer_ns": [1e6, 3e6]}))
    assert [list(t.x) for t in pw.data] == [[2.0, 0.0], [1.0, 3.0]]


def test_sync_figure_one_trace_per_api() -> None:
    sy = pd.DataFrame({"rank": [0, 0, 1], "start_ns": [0, 10, 20], "end_ns": [5, 15, 25],
                       "name": ["cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaStreamSynchronize"],
                       "blocked_ns": [5.0, 5.0, 5.0], "gpu_idle_ns": [1.0, 4.0, 0.0], "caller": ["a", "b", "c"]})
    fig = sync_figure(sy)
    assert sorted(t.name for t in fig.data) == ["cudaDeviceSynchronize", "cudaStreamSynchronize",
                                                "cudaStreamSynchronize, no GPU idle (harmless)"]  # idle 0 apart
    assert sum(len(t.x) for t in fig.data) == 3


def test_figure_modules_do_not_import_streamlit() -> None:
    code = ("import sys; import viz.figures, viz.lod, viz.timeline, app.data; "
            "assert 'streamlit' not in sys.modules, 'streamlit imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_payload_is_typed_arrays(sample_sets) -> None:
    kin, _ = sample_sets
    d = prepare_timeline(kin)
    fig = timeline_figure(lod_for_windows([d], [(d.t_min, d.t_min, d.t_max)]))
    text = fig.to_json()
    assert '"bdata"' in text and '"dtype":"f4"' in text.replace(" ", "")
    assert figure_payload_bytes(fig) == len(text.encode())


# --------------------------------------------------------------------------- sources, roots, uploads


def test_discover_samples_reads_manifests_and_hides_env(samples: Path) -> None:
    found = {s.label: s for s in data.discover_samples(samples)}
    assert set(found) == {"demo/kineto", "demo/nsys"}
    assert [Path(p).name for p in found["demo/kineto"].paths] == list(KINETO_PAIR)
    assert found["demo/kineto"].group == "demo"
    m = found["demo/kineto"].manifest()
    assert m is not None and "env" not in m and m["variant"] == "kineto"


def test_sources_from_paths_groups_files_by_folder(samples: Path) -> None:
    kin = samples / "demo" / "kineto"
    srcs = data.sources_from_paths([str(kin / KINETO_PAIR[0]), str(kin / KINETO_PAIR[1]), str(samples / "demo")])
    # the two files form one source; demo/ holds two runs (kineto, nsys): one source each
    assert len(srcs) == 3
    assert sorted(s.label for s in srcs if s.manifest_path) == ["demo/kineto", "demo/nsys"]
    files = next(s for s in srcs if len(s.paths) == 2)
    assert {Path(p).name for p in files.paths} == set(KINETO_PAIR)


def test_allowed_roots_default_and_env(samples: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(data.ENV_SAMPLES, str(samples))
    monkeypatch.delenv(data.ENV_ALLOWED_ROOTS, raising=False)
    assert data.allowed_roots([str(tmp_path)]) == [samples.resolve(), tmp_path.resolve()]
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.setenv(data.ENV_ALLOWED_ROOTS, os.pathsep.join([str(other), "/does/not/exist"]))
    assert data.allowed_roots([str(tmp_path)]) == [other.resolve()]


def test_check_allowed_refuses_escapes(samples: Path, tmp_path: Path) -> None:
    roots = [samples.resolve()]
    inside = samples / "demo" / "kineto" / KINETO_PAIR[0]
    assert data.check_allowed(str(inside), roots) == inside.resolve()
    outside = tmp_path / "secret.json"
    outside.write_text("{}")
    for bad in (str(outside), str(samples / ".." / outside.name), "/etc/passwd", "relative/path.json", ""):
        with pytest.raises(data.PathNotAllowed):
            data.check_allowed(bad, roots)
    # a symlink inside the root that points outside it is an escape
    link_root = tmp_path / "root"
    link_root.mkdir()
    (link_root / "link.json").symlink_to(outside)
    with pytest.raises(data.PathNotAllowed, match="outside the allowed roots"):
        data.check_allowed(str(link_root / "link.json"), [link_root.resolve()])
    # a missing path outside the roots does not reveal whether it exists
    with pytest.raises(data.PathNotAllowed, match="outside the allowed roots"):
        data.check_allowed("/nonexistent/x.json", roots)
    with pytest.raises(data.PathNotAllowed, match="no such file"):
        data.check_allowed(str(samples / "nope.json"), roots)


def test_server_source_refuses_symlinked_files_in_a_folder(tmp_path: Path, hta_dir: Path) -> None:
    root = tmp_path / "root"
    run = root / "run"
    run.mkdir(parents=True)
    shutil.copy(hta_dir / KINETO_PAIR[0], run / "rank0.json.gz")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(hta_dir / KINETO_PAIR[1], elsewhere / "rank1.json.gz")
    roots = [root.resolve()]
    assert data.server_source(str(run), roots).kind == "server"
    (run / "rank1.json.gz").symlink_to(elsewhere / "rank1.json.gz")
    with pytest.raises(data.PathNotAllowed):
        data.server_source(str(run), roots)


def test_save_uploads_checks(tmp_path: Path) -> None:
    with pytest.raises(data.UploadRejected, match="not a trace file"):
        uploads.save_uploads([("notes.txt", b"x")], tmp_path)
    with pytest.raises(data.UploadRejected, match="not a trace file"):
        uploads.save_uploads([("trace.gz", b"x")], tmp_path)
    with pytest.raises(data.UploadRejected, match="empty file"):
        uploads.save_uploads([("a.json", b"")], tmp_path)
    with pytest.raises(data.UploadRejected, match="larger than the 1 MB limit"):
        uploads.save_uploads([("a.json", b"x" * (1024 * 1024 + 1))], tmp_path, limit_mb=1)
    with pytest.raises(data.UploadRejected, match="larger than the 1 MB limit"):  # the total counts
        uploads.save_uploads([("a.json", b"x" * 600_000), ("b.json", b"x" * 600_000)], tmp_path, limit_mb=1)
    src = uploads.save_uploads([("../../evil/rank0.json", b"{}")], tmp_path)
    assert Path(src.paths[0]).parent.parent == tmp_path and Path(src.paths[0]).name == "rank0.json"
    uploads.discard_upload(src)
    assert not Path(src.paths[0]).exists()


def test_fingerprint_changes_with_the_file(tmp_path: Path, hta_dir: Path) -> None:
    f = tmp_path / "rank0.json.gz"
    shutil.copy(hta_dir / KINETO_PAIR[0], f)
    before = data.fingerprint([str(f)])
    assert before == ((str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns),)
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))
    assert data.fingerprint([str(f)]) != before


def test_reproduce_command(samples: Path) -> None:
    m = data.read_manifest(samples / "demo" / "kineto" / "manifest.json")
    cmd = data.reproduce_command(m, "/out/x")
    assert cmd[:5] == ["overlapscope", "run", "demo", "--variant", "kineto"]
    assert "--nproc" not in cmd and "--profiler" not in cmd and cmd[cmd.index("--out") + 1] == "/out/x"
    assert [a for a in cmd if "=" in a] == ["m=4096", "streams=2", "check=true"]
    with pytest.raises(ValueError):
        data.reproduce_command({}, "/out")


# --------------------------------------------------------------------------- the CLI command


def test_cli_app_dry_run(capsys: pytest.CaptureFixture[str], samples: Path) -> None:
    from overlapscope.cli import main

    assert main(["app", "--dry-run", "--port", "8599", str(samples / "demo" / "kineto")]) == 0
    out = capsys.readouterr().out
    assert str(ROOT / "app" / "serve.py") in out  # streamlit run app/main.py, loading the runs as it starts
    assert "--server.headless true" in out and "--server.port 8599" in out
    assert out.strip().endswith(str((samples / "demo" / "kineto").resolve()))


def test_cli_app_missing_path_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    from overlapscope.cli import main

    assert main(["app", "--dry-run", "/no/such/run"]) == 3
    assert "/no/such/run: no such file or directory" in capsys.readouterr().err


# --------------------------------------------------------------------------- pages (AppTest)


def _app():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT)
    at.run()
    return at


def _charts(at) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def _arr_len(x) -> int:
    """Length of a plotly JSON array, plain or typed (base64 'bdata')."""
    if isinstance(x, dict):
        import base64

        return len(base64.b64decode(x["bdata"])) // np.dtype(x["dtype"]).itemsize
    return len(x)


def _no_errors(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def test_overview_page(app_env: Path, sample_sets) -> None:
    at = _app()
    _no_errors(at)
    assert at.title[0].value == "Overview"
    assert at.session_state["os_selected"] == ["sample:demo/kineto", "sample:demo/nsys"]
    metrics = {}
    for m in at.metric:
        metrics.setdefault(m.label, []).append(m.value)
    for i, ts in enumerate(sample_sets):
        rep = analyze(ts)
        ratios = [m.overlap_ratio for m in rep.ranks if m.overlap_ratio is not None]
        expected = labels.value("ratio", min(ratios) if ratios else None)  # nsys sample: no communication, n/a
        assert metrics["Overlap ratio (worst rank)"][i] == expected
    bars = _charts(at)[0]
    assert [t["name"] for t in bars["data"]][:3] == ["compute only", "overlapped", "exposed communication"]
    assert len(bars["data"][0]["y"]) == sum(len(ts) for ts in sample_sets)
    # findings with their evidence, or the plain "nothing found"
    assert any("finding(s)" in md.value for md in at.markdown)
    assert at.expander, "findings are listed in expanders"
    # the critical path's attribution bar per rank, one bar per part
    crit = [c for c in _charts(at) if "critical path" in str(c["layout"].get("title", ""))]
    assert crit and {t["name"] for t in crit[0]["data"]} >= {"compute", "peer wait", "launch gaps"}


def test_timeline_page(app_env: Path, sample_sets) -> None:
    at = _app()
    at.switch_page("views/timeline.py").run()
    _no_errors(at)
    fig = _charts(at)[0]
    assert {t["type"] for t in fig["data"]} == {"scattergl", "heatmap"}  # WebGL drawing, hover rows
    assert all(t.get("name") == "hover" for t in fig["data"] if t["type"] == "heatmap")
    assert any(t.get("name") == "critical path" and t["x"] for t in fig["data"])  # critical activities outlined
    assert "xaxis2" in fig["layout"]  # both runs in one figure
    assert fig["layout"]["yaxis"]["ticktext"][0] == "rank 0 · overlap / exposed"
    assert any("segments drawn" in c.value for c in at.caption)
    rows = at.dataframe[0].value
    assert len(rows) == sum(len(ts) for ts in sample_sets)
    # narrowing the window re-aggregates: fewer intervals, metrics of the window
    slider = at.slider[0]
    lo, hi = slider.value
    slider.set_value((lo, lo + (hi - lo) / 10)).run()
    _no_errors(at)
    narrow = at.dataframe[0].value

    def count(frame):  # the table shows text, as the registry formats it ("1,234")
        return frame[labels.header("n_gpu")].str.replace(",", "").astype(int)

    assert (count(narrow) <= count(rows)).all() and (count(narrow) < count(rows)).any()
    # a step selection aligns the runs at that step
    steps = [o for o in at.selectbox[0].options if o != "whole trace"]
    at.selectbox[0].set_value("whole trace").run()
    _no_errors(at)
    assert steps, "the Kineto sample has ProfilerStep ranges"


def test_crossrank_page(app_env: Path, sample_sets) -> None:
    from analyzers.crossrank import analyze_cross_rank

    at = _app()
    at.switch_page("views/crossrank.py").run()
    _no_errors(at)
    expected = analyze_cross_rank(sample_sets[0])
    matched = [m.value for m in at.metric if m.label == "Matched collectives"]
    assert matched[0] == f"{expected.n_matched:,}"
    heat = [f for f in _charts(at) if f["data"] and f["data"][0]["type"] == "heatmap"]
    assert heat and len(heat[0]["data"][0]["x"]) == expected.n_matched


def test_syncs_page(app_env: Path, sample_sets) -> None:
    from analyzers.syncs.blocking import blocking_syncs

    at = _app()
    at.switch_page("views/syncs.py").run()
    _no_errors(at)
    nsys = sample_sets[1]
    n = sum(len(blocking_syncs(t)) for t in nsys)
    assert n > 0
    shown = {m.label: m.value for m in at.metric}
    assert int(shown["Syncs that idled the GPU"]) + int(shown["Harmless syncs (no GPU idle)"]) == n
    table = at.dataframe[0].value
    assert len(table) == n and set(table["rank"]) == {str(r) for r in nsys.rank_ids()}
    fig = _charts(at)[0]
    assert sum(_arr_len(t["x"]) for t in fig["data"]) == n  # one marker per sync


def test_diff_page(app_env: Path, sample_sets) -> None:
    from analyzers.diff import diff_reports

    at = _app()
    at.switch_page("views/diff.py").run()
    _no_errors(at)
    kin, nsy = sample_sets
    d = diff_reports(analyze(kin), analyze(nsy), kin, nsy, ("demo/kineto", "demo/nsys"))
    box = next(x.value for x in [*at.success, *at.info, *at.warning] if "Verdict" in x.value)
    assert d.verdict.split(":")[0] in html.unescape(box.replace("\\", ""))  # shown with Markdown escaped
    agg = at.dataframe[0].value
    assert list(agg.columns[:3]) == ["metric", "demo/kineto", "demo/nsys"]
    assert "xaxis2" in _charts(at)[0]["layout"]  # both timelines, one figure
    at.selectbox(key="diff_b").set_value("sample:demo/kineto").run()
    assert at.warning and "two different runs" in at.warning[0].value


def test_run_page_without_gpus(app_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi
    at = _app()
    at.switch_page("views/run.py").run()
    _no_errors(at)
    code = at.code[0].value
    assert code.startswith("overlapscope run demo --variant kineto --out ")
    assert "SECRET_TOKEN" not in str(at.json[0].value if at.json else "")
    assert any("GPU host" in i.value for i in at.info)
    assert "run_go" not in [b.key for b in at.button]  # no Run button without the GPUs


def test_bad_upload_shows_a_clear_message(app_env: Path) -> None:
    at = _app()
    at.sidebar.file_uploader[0].set_value(("rank0.json", b"this is not json", "application/json")).run()
    errors = [e.value for e in at.error]
    assert any(e.startswith("Upload could not be read: rank0.json:") for e in errors), errors
    assert not at.exception
    assert len(at.session_state["os_sources"]) == 2  # nothing added


def test_upload_over_the_cap_is_refused(app_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(data.ENV_MAX_UPLOAD_MB, "1")
    at = _app()
    at.sidebar.file_uploader[0].set_value(("big.json", b"{" + b" " * (1024 * 1024 + 10) + b"}",
                                           "application/json")).run()
    assert any("larger than the 1 MB limit" in e.value for e in at.error)


def test_good_upload_becomes_a_selected_run(app_env: Path, hta_dir: Path) -> None:
    at = _app()
    files = [(n, (hta_dir / n).read_bytes(), "application/gzip") for n in KINETO_PAIR]
    at.sidebar.file_uploader[0].set_value(files).run()
    _no_errors(at)
    ups = [k for k in at.session_state["os_selected"] if k.startswith("upload:")]
    assert len(ups) == 1 and any("Uploaded" in s.value for s in at.success)


def test_server_path_outside_roots_is_refused(app_env: Path, tmp_path: Path) -> None:
    at = _app()
    at.sidebar.text_input(key="os_server_path").set_value("/etc")
    at.sidebar.button[0].click().run()
    assert any("Server path refused" in e.value and "outside the allowed roots" in e.value for e in at.error)
    inside = app_env / "demo" / "kineto"
    at.sidebar.text_input(key="os_server_path").set_value(str(inside))
    at.sidebar.button[0].click().run()
    _no_errors(at)
    assert any(k.startswith("server:") for k in at.session_state["os_selected"])


def test_command_line_paths_are_the_default_selection(app_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(data.ENV_APP_PATHS, str(NSYS_TRACES / "mfu_2gpu_before.sqlite"))
    at = _app()
    _no_errors(at)
    sel = at.session_state["os_selected"]
    assert len(sel) == 1 and sel[0].startswith("path:") and "mfu_2gpu_before.sqlite" in sel[0]


def test_finding_links_to_its_time_range(app_env: Path, sample_sets) -> None:
    from analyzers.crossrank import analyze_cross_rank
    from analyzers.findings import cross_rank_findings, detect_findings
    from analyzers.syncs.blocking import blocking_syncs

    kin = sample_sets[0]
    rep = analyze(kin)
    found = detect_findings(kin, metrics={m.rank: m for m in rep.ranks},
                            extra=cross_rank_findings(analyze_cross_rank(kin)),
                            syncs={r: blocking_syncs(kin.ranks[r]) for r in kin.rank_ids()})
    first = next(i for i, f in enumerate(found) if f.start_ns is not None)
    f = found[first]
    at = _app()
    buttons = [b for b in at.button if b.key == f"finding-sample:demo/kineto-{first}"]
    assert buttons, "the samples have findings with a time range"
    buttons[0].click().run()
    _no_errors(at)
    assert at.title[0].value == "Timeline" and at.selectbox[0].value == "whole trace"
    t0 = prepare_timeline(kin).t_min
    pad = 0.1 * max(f.end_ns - f.start_ns, 1000)
    lo, hi = at.slider[0].value
    assert lo == pytest.approx(max((f.start_ns - pad - t0) / 1e6, 0.0), abs=1e-6)
    assert hi == pytest.approx(min((f.end_ns + pad - t0) / 1e6, at.slider[0].max), abs=1e-6)


def test_runs_query_parameter_selects_runs(app_env: Path) -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT)
    at.query_params["runs"] = "demo/nsys,unknown/run"
    at.run()
    _no_errors(at)
    assert at.session_state["os_selected"] == ["sample:demo/nsys"]


def test_opens_on_the_bundled_sample_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    """No paths, no settings: the app opens on sample_traces/ and every page renders."""
    for var in (data.ENV_SAMPLES, data.ENV_ALLOWED_ROOTS, data.ENV_APP_PATHS, data.ENV_MAX_UPLOAD_MB):
        monkeypatch.delenv(var, raising=False)
    samples = data.discover_samples(ROOT / "sample_traces")
    assert len(samples) >= 2, "sample_traces/ holds the bundled runs (each with a manifest.json)"
    at = _app()
    _no_errors(at)
    selected = at.session_state["os_selected"]
    assert selected == ["sample:ag-gemm/host-sync", "sample:ag-gemm/tuned"]  # a broken schedule and its fix
    srcs = {s.key: s for s in samples}
    first = load_traces(list(srcs[selected[0]].paths))
    ratios = [m.overlap_ratio for m in analyze(first).ranks if m.overlap_ratio is not None]
    shown = [m.value for m in at.metric if m.label == "Overlap ratio (worst rank)"][0]
    assert shown == labels.value("ratio", min(ratios) if ratios else None)
    for page in ("timeline", "crossrank", "syncs", "collectives", "diff", "run"):
        at.switch_page(f"views/{page}.py").run()
        _no_errors(at)


def test_collectives_page(app_env: Path, sample_sets) -> None:
    from viz.collectives_figure import plottable

    at = _app()
    at.switch_page("views/collectives.py").run()
    _no_errors(at)
    kin = sample_sets[0]
    table = analyze(kin).collectives
    assert [m.value for m in at.metric if m.label == "Communication activities"][0] == f"{len(table.rows):,}"
    # HTA's trace_filter pair: 10 SendRecv kernels per rank without message-size args, so nothing to plot
    assert plottable(table.rows).empty and not _charts(at)
    assert any("No activity carries a message size" in c.value for c in at.caption)


def test_collectives_figure_points_are_rows() -> None:
    """One point per sized activity (2 x H200 all-gathers), coloured by overlap state; a point's customdata
    is its row in the table, which the page's timeline jump reads."""
    from viz.collectives_figure import busbw_figure, plottable

    table = analyze(load_traces([ROOT / "sample_traces" / "fsdp" / "zero3"])).collectives
    fig = busbw_figure(table.rows, table.link_gbps)
    assert sum(len(t.x) for t in fig.data) == len(plottable(table.rows)) == len(table.rows)
    assert {t.name for t in fig.data} == {"alone", "overlapped with compute"}
    for trace in fig.data:
        idx = np.asarray(trace.customdata)[:, 0].astype(int)
        assert (table.rows.loc[idx, "bytes"].to_numpy() == np.asarray(trace.x)).all()
        assert (table.rows.loc[idx, "busbw_gbps"].to_numpy() == pytest.approx(np.asarray(trace.y)))
        assert set(table.rows.loc[idx, "overlapped"]) == {trace.name != "alone"}
    assert fig.layout.shapes[0].y0 == 450  # the H200 link peak line
