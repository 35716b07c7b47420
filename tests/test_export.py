"""`overlapscope export`: the Perfetto JSON validates (well-formed events, no overlapping
complete events on one lane, every kernel exactly once, ranks and streams named, clock
offsets applied), on hand-made ranks whose answers are known and on real Kineto and nsys
traces; the PNG is a real image of the requested size; bad requests fail cleanly.
(The HTML report in a real browser: tests/test_export_browser.py.)"""

from __future__ import annotations

import gzip
import html
import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from analyzers.export.perfetto import perfetto_data, pid_of, split_lanes
from analyzers.io.load import load_traces
from analyzers.report import analyze
from analyzers.timeline.model import CATEGORIES
from viz.perfetto_json import write_perfetto

from .conftest import SAMPLES
from .inprocess import cli
from .synth import GEMM
from .synth_multi import US, collective_run

HOST_SYNC = SAMPLES / "ag-gemm" / "host-sync"
NSYS_SET = SAMPLES / "ag-gemm-nsys" / "sync-in-loop"


def load_doc(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def validate(doc: dict) -> dict:
    """Check the Chrome-trace rules Perfetto relies on; return events grouped for further checks."""
    events = doc["traceEvents"]
    names: dict[tuple[int, int], str] = {}
    procs: dict[int, str] = {}
    lanes: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for ev in events:
        assert isinstance(ev.get("ph"), str) and isinstance(ev.get("pid"), int) and isinstance(ev.get("tid"), int)
        assert isinstance(ev.get("name"), str)
        if ev["ph"] == "M":
            if ev["name"] == "thread_name":
                names[(ev["pid"], ev["tid"])] = ev["args"]["name"]
            elif ev["name"] == "process_name":
                procs[ev["pid"]] = ev["args"]["name"]
        elif ev["ph"] == "X":
            assert isinstance(ev["ts"], int | float) and isinstance(ev["dur"], int | float) and ev["dur"] >= 0
            assert ev["ts"] >= 0 and isinstance(ev.get("args"), dict)
            lanes[(ev["pid"], ev["tid"])].append((ev["ts"], ev["ts"] + ev["dur"]))
        elif ev["ph"] == "i":
            assert isinstance(ev["ts"], int | float) and ev["s"] in ("t", "p", "g")
        else:
            raise AssertionError(f"unexpected phase {ev['ph']}")
    for key, spans in lanes.items():
        assert key in names, f"lane {key} has no thread name"
        assert key[0] in procs, f"process {key[0]} has no name"
        spans.sort(key=lambda x: (x[0], -x[1]))
        stack: list[float] = []  # ends of the open enclosing events
        for s, e in spans:
            while stack and stack[-1] <= s + 1e-9:
                stack.pop()
            assert not stack or e <= stack[-1] + 1e-9, f"events overlap without nesting on lane {key}: {s}-{e}"
            stack.append(e)
    return {"events": events, "threads": names, "processes": procs}


def gpu_events(doc: dict, pid: int) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == pid and e.get("cat") in CATEGORIES]


def assert_every_kernel_once(doc: dict, traces, report) -> None:
    """Each GPU row of each rank appears once, at its aligned time (ns from the file's origin)."""
    origin = doc["otherData"]["overlapscope"]["origin_ns"]
    offsets = {int(k): v for k, v in doc["otherData"]["overlapscope"]["clock_offsets_ns"].items()}
    for t in traces:
        got = Counter((e["name"], round(e["ts"] * 1000), round(e["dur"] * 1000))
                      for e in gpu_events(doc, pid_of(t.rank)))
        g = t.gpu
        s = g["start_ns"].to_numpy() + offsets[t.rank] - origin
        want = Counter(zip(t.names_of(g["name_id"].to_numpy()).tolist(), s.tolist(),
                           (g["end_ns"] - g["start_ns"]).to_numpy().tolist(), strict=True))
        assert got == want and sum(got.values()) == len(g)


# --------------------------------------------------------------------------- lanes


def test_split_lanes_uses_as_few_lanes_as_the_deepest_overlap():
    s = np.array([0, 5, 10, 12, 20, 40])
    e = np.array([10, 15, 20, 13, 30, 50])
    lanes = split_lanes(np.zeros(6, dtype=np.int64), s, e)
    assert lanes.max() + 1 == 3  # [5,15), [10,20), [12,13) all cover t=12
    for k in range(3):
        sel = np.flatnonzero(lanes == k)
        o = sel[np.argsort(s[sel])]
        assert np.all(s[o][1:] >= e[o][:-1])
    # keys apart: a well-formed key stays on lane 0
    assert split_lanes(np.array([0, 1, 0, 1, 0, 0]), s, e).tolist() == [0, 0, 0, 1, 0, 0]


# --------------------------------------------------------------------------- hand-made ranks


@pytest.fixture(scope="module")
def offset_set():
    """Two ranks on different hosts, rank 1's clock 1.234567 ms behind; on stream 0 of every
    period a GEMM [0, 300 µs) and one [250, 400 µs) that overlaps it (without nesting)."""
    ts, truth = collective_run(2, arrivals={0: [0, 5 * US, 0, 9 * US, 0, 3 * US], 1: [4 * US, 0, 7 * US, 0, 2 * US, 0]},
                               offsets={1: 1_234_567}, hostnames={0: "node-a", 1: "node-b"},
                               compute=[(0, 300 * US), (250 * US, 400 * US)])
    report = analyze(ts)
    return ts, truth, report


def test_perfetto_of_hand_made_ranks_validates_with_known_answers(offset_set, tmp_path):
    ts, truth, report = offset_set
    out = tmp_path / "t.json"
    write_perfetto(perfetto_data(ts, report), out)
    doc = load_doc(out)
    v = validate(doc)
    assert v["processes"] == {1: "rank 0", 2: "rank 1"}
    off = report.cross_rank.clock.offsets_ns[1]
    assert abs(off - 1_234_567) <= 1_000
    assert_every_kernel_once(doc, ts, report)
    for r in (0, 1):
        pid = pid_of(r)
        # the overlapping GEMMs went to a second lane of stream 0
        lanes = {v["threads"][(pid, e["tid"])] for e in gpu_events(doc, pid) if e["name"] == GEMM}
        dev = int(ts.ranks[r].gpu["device"].iloc[0])
        assert lanes == {f"gpu {dev} · stream 0", f"gpu {dev} · stream 0 · lane 2"}
        by_track = defaultdict(float)
        for e in doc["traceEvents"]:
            if e["ph"] == "X" and e["pid"] == pid:
                by_track[v["threads"][(pid, e["tid"])].split(" · lane")[0]] += e["dur"] * 1000
        m = report.rank(r).whole
        assert round(by_track["hidden comm: comm ∩ compute"]) == m.overlap_ns
        assert round(by_track["exposed comm"]) == m.exposed_comm_ns
        assert round(by_track["peer wait"]) == truth["wait"][r]  # known by construction
    # offsets applied: all ranks end each all-reduce together on the true timeline
    ends = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e.get("cat") == "comm":
            ends[e["pid"]].append(e["ts"] + e["dur"])
    assert np.max(np.abs(np.sort(ends[1]) - np.sort(ends[2]))) <= 1.0  # µs


def test_one_marker_per_finding_with_its_text(tmp_path):
    ts = load_traces([str(HOST_SYNC)])
    report = analyze(ts)
    assert report.findings
    out = tmp_path / "t.json.gz"
    write_perfetto(perfetto_data(ts, report), out)
    doc = load_doc(out)
    v = validate(doc)
    marks = [e for e in doc["traceEvents"] if e["ph"] == "i"]
    assert sorted(m["args"]["title"] for m in marks) == sorted(f.title for f in report.findings)
    for m in marks:
        assert m["args"]["fix"] and m["args"]["explanation"] and m["args"]["id"] in m["name"]
        assert v["threads"][(m["pid"], m["tid"])] == "findings"
    syncs = [e for e in doc["traceEvents"] if e["ph"] == "X" and e.get("cat") == "host_sync"]
    assert len(syncs) == sum(len(df) for df in report.syncs.values())


@pytest.mark.parametrize("path", [HOST_SYNC, NSYS_SET], ids=["kineto", "nsys"])
def test_perfetto_of_real_traces_validates(path, tmp_path):
    ts = load_traces([str(path)])
    report = analyze(ts)
    out = tmp_path / "t.json"
    write_perfetto(perfetto_data(ts, report), out)
    doc = load_doc(out)
    v = validate(doc)
    assert set(v["processes"].values()) == {f"rank {r}" for r in ts.rank_ids()}
    for t in ts:
        for d, s in set(zip(t.gpu["device"], t.gpu["stream"], strict=True)):
            assert f"gpu {d} · stream {s}" in v["threads"].values()
    assert_every_kernel_once(doc, ts, report)


def test_nsys_sessions_are_put_on_one_clock(tmp_path):
    ts = load_traces([str(NSYS_SET)])
    report = analyze(ts)
    off = report.cross_rank.clock.offsets_ns
    assert report.cross_rank.clock.applied and off[1] != 0  # separate sessions: a real offset
    out = tmp_path / "t.json"
    write_perfetto(perfetto_data(ts, report), out)
    doc = load_doc(out)
    assert doc["otherData"]["overlapscope"]["clock_offsets_ns"] == {str(k): v for k, v in off.items()}
    first = {pid_of(r): min(e["ts"] for e in gpu_events(doc, pid_of(r))) for r in ts.rank_ids()}
    raw = {r: int(ts.ranks[r].gpu["start_ns"].min()) for r in ts.rank_ids()}
    assert abs(abs(raw[1] - raw[0]) - abs(first[2] - first[1]) * 1000) > 1_000_000  # the shift moved rank 1
    assert abs((first[2] - first[1]) * 1000 - (raw[1] + off[1] - raw[0] - off[0])) < 1


# --------------------------------------------------------------------------- the command


@pytest.mark.browser  # the PNG / SVG: kaleido drives Debian's chromium
def test_cli_writes_all_files(tmp_path):
    outs = {k: tmp_path / f"r.{k}" for k in ("json.gz", "html", "png")}
    res = cli("export", str(HOST_SYNC), "--perfetto", str(outs["json.gz"]), "--html", str(outs["html"]),
              "--png", str(outs["png"]), "--width", "900", "--height", "500")
    assert res.returncode == 0, res.stderr
    validate(load_doc(outs["json.gz"]))
    assert outs["html"].stat().st_size < 10_000_000
    from PIL import Image

    with Image.open(outs["png"]) as im:
        assert im.format == "PNG" and im.size == (900, 500)
        px = np.asarray(im.convert("RGB")).reshape(-1, 3)
    colours = {tuple(c) for c in px[:: max(1, len(px) // 20000)]}
    assert len(colours) > 20  # not a blank canvas
    near = lambda rgb: (np.abs(px.astype(int) - rgb).sum(axis=1) < 40).sum()  # noqa: E731
    assert near((0x1F, 0x77, 0xB4)) > 500 and near((0xFF, 0x7F, 0x0E)) > 100  # compute blue, comm orange


@pytest.mark.browser  # the PNG / SVG: kaleido drives Debian's chromium
def test_cli_svg_and_diff(tmp_path):
    a, b = SAMPLES / "ag-gemm" / "host-sync", SAMPLES / "ag-gemm" / "sync-before-loop"
    res = cli("export", "--diff", str(a), str(b), "--html", str(tmp_path / "d.html"), "--svg", str(tmp_path / "d.svg"))
    assert res.returncode == 0, res.stderr
    text = (tmp_path / "d.html").read_text()
    verdict = res.stderr.splitlines()[0]
    assert verdict and html.escape(verdict) in text and "host-sync" in text and "sync-before-loop" in text
    assert (tmp_path / "d.svg").read_text().startswith("<svg")
    res = cli("diff", str(a), str(b), "--html", str(tmp_path / "d2.html"))
    assert res.returncode == 0, res.stderr
    assert "Both timelines" in (tmp_path / "d2.html").read_text()


def test_cli_bad_requests(tmp_path):
    res = cli("export", str(HOST_SYNC))
    assert res.returncode == 2 and "nothing to write" in res.stderr
    res = cli("export", str(HOST_SYNC), "--perfetto", str(tmp_path / "x.txt"))
    assert res.returncode == 2 and ".json" in res.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    res = cli("export", str(bad), "--perfetto", str(tmp_path / "x.json"))
    assert res.returncode == 3 and "Traceback" not in res.stderr and str(bad.name) in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.json").exists()
    assert bad.read_text() == "{not json"


def test_export_never_clobbers_an_existing_file(tmp_path, capsys):
    """Every output is checked before any work: an existing file is refused (exit 2) unless --overwrite."""
    from overlapscope.cli import main

    from .conftest import HTA_TRACES

    trace = str(HTA_TRACES / "trace_filter_sampled_rank-0.json.gz")
    for option, name in (("--perfetto", "t.json"), ("--html", "r.html"), ("--png", "t.png"), ("--svg", "t.svg")):
        target = tmp_path / name
        target.write_text("mine\n")
        assert main(["export", trace, option, str(target)]) == 2
        err = capsys.readouterr().err
        assert f"{option} {target}: the file exists; pass --overwrite" in err and err.strip().count("\n") == 0
        assert target.read_text() == "mine\n"
    target = tmp_path / "t.json"
    assert main(["export", trace, "--perfetto", str(target), "--overwrite"]) == 0
    assert json.loads(target.read_text())["traceEvents"]
