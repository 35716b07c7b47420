"""Trace diff: hand-built schedule variants with known answers, the HTA pair of different
jobs, the CLI, and the ag-gemm sample traces when they are in the tree."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyzers.diff import (
    IDENTICAL,
    aligned_timelines,
    compare_many,
    diff_reports,
    iteration_stats,
    pair_ranks,
    section_total,
)
from analyzers.io.load import load_traces
from analyzers.overlap.metrics import AnalysisOptions
from analyzers.report import analyze
from analyzers.timeline.iterations import StepSelection
from analyzers.timeline.model import TraceSet
from overlapscope import render_diff

from .inprocess import cli
from .synth import COMM, GEMM, rank_trace

ROOT = Path(__file__).resolve().parents[1]
U = 100_000  # 0.1 ms: the time unit of the hand-made schedules below
ADD4 = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
        "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)")
ADD2 = ADD4.replace("kernel<4,", "kernel<2,")


def schedule(overlapped: bool, gaps: list[int], ranks: int = 2, add_kernel: str = ADD4, first_step: int = 1,
             rank_offset: int = 0, extra_gemms: int = 0, host_sync: bool = False) -> TraceSet:
    """One step per entry of `gaps`: comm [t, t+10U) on stream 1, gemm of 10U on stream 0
    starting at t+2U (overlapped: 8U of the 10U comm hidden) or t+10U (serialized, as
    behind a host sync), then a 1U add kernel; the next step starts `gap` after that.
    host_sync: the host blocks in cudaStreamSynchronize from t-U/4 until the comm ends
    (10.25U), then launches the gemm, which starts U/10 later (the GPU idles meanwhile), as
    in the ag-gemm host-sync variant."""
    traces = {}
    for r in range(ranks):
        kernels, steps, launches, runtime = [], [], [], []
        t, corr = 10 * U + r * rank_offset, 0  # launches at t - U/2 must be >= 0 (negative = unknown)
        for i, gap in enumerate(gaps):
            off = 2 * U if overlapped else 10 * U + (U // 10 if host_sync else 0)  # + launch latency after a sync
            body = [(t, t + 10 * U, 1, COMM), (t + off, t + off + 10 * U, 0, GEMM),
                    (t + off + 10 * U, t + off + 11 * U, 0, add_kernel)]
            body += [(t + off + 11 * U + j * U, t + off + 12 * U + j * U, 0, GEMM) for j in range(extra_gemms)]
            if host_sync:
                runtime.append(("cudaStreamSynchronize", t - U // 4, t + 10 * U, 10_000 + corr))
            for j, (s, e, stream, name) in enumerate(body):
                kernels.append((s, e, stream, name, "kernel", corr))
                launches.append((corr, t + 10 * U + 10 if host_sync and j > 0 else t - U // 2))
                corr += 1
            end = body[-1][1]
            steps.append((first_step + i, t - U, end + gap - U))
            t = end + gap
        traces[r] = rank_trace(kernels, rank=r, steps=steps, launches=launches, runtime=runtime, world_size=ranks)
    return TraceSet(ranks=traces, label="overlapped" if overlapped else "serialized", fmt="synthetic",
                    world_size=ranks)


def both(ta: TraceSet, tb: TraceSet, labels=("A", "B"), **kw):
    ra, rb = analyze(ta), analyze(tb)
    return ra, rb, diff_reports(ra, rb, ta, tb, labels, **kw)


def agg(d, metric: str) -> dict:
    return d.aggregate.set_index("metric").loc[metric].to_dict()


def test_identical_sets_report_zero_change_and_only_identical():
    ts = schedule(False, [0, 0, 0])
    _, _, d = both(ts, ts)
    assert d.verdict == IDENTICAL and d.identical
    assert np.all((d.ranks["delta"] == 0) | (d.ranks["a"].isna() & d.ranks["b"].isna()))
    assert (d.aggregate["delta"].fillna(0) == 0).all()
    assert (d.kernels[["count_delta", "total_ns_delta", "mean_ns_delta"]] == 0).all().all()
    assert d.findings["only_a"] == [] and d.findings["only_b"] == []


def test_hidden_communication_and_time_saved_by_hand():
    a, b = schedule(False, [0, 0, 0]), schedule(True, [0, 0, 0])
    ra, rb, d = both(a, b, ("host-sync", "sync-before-loop"))
    # per step and rank: comm 10U; A: gemm after comm, overlap 0, step 21U; B: overlap 8U, step 13U
    ov = agg(d, "overlap_ratio")
    assert (ov["a"], ov["b"]) == (0.0, 0.8) and math.isclose(ov["delta"], 0.8)
    ex = agg(d, "exposed_comm_ns")  # summed over 2 ranks x 3 steps
    assert (ex["a"], ex["b"], ex["delta"]) == (60 * U, 12 * U, -48 * U) and math.isclose(ex["rel"], -0.8)
    it = agg(d, "iteration_ns_median")
    assert (it["a"], it["b"]) == (21 * U, 13 * U)
    assert d.iterations["host-sync"]["durations_ns"] == [21 * U] * 3
    assert d.verdict == ("sync-before-loop hides 80.0 points more communication (overlap 0.0% -> 80.0%) and is "
                         "38.1% faster per iteration (2.1 -> 1.3 ms), beyond the iteration spread (±0 ms)")
    r0 = d.ranks[(d.ranks.rank_a == 0) & (d.ranks.metric == "overlap_ns")].iloc[0]
    assert (r0["a"], r0["b"], r0["delta"]) == (0, 24 * U, 24 * U)
    assert not d.identical and d.notes == []
    assert d.aggregation == "sum over ranks" and d.rank_pairs == [(0, 0), (1, 1)]


def test_difference_within_the_iteration_spread():
    a = schedule(True, [0, 0, 0, 0])  # every step 13U
    b = schedule(True, [8 * U, 0] * 4)  # steps alternate 21U and 13U
    ib = iteration_stats(analyze(b))
    assert ib["iteration_ns_median"] == 17 * U and ib["spread_ns"] == 4 * U  # quartiles 13U and 21U
    _, _, d = both(a, b)
    assert d.verdict.startswith("both hide 80.0% of communication; "
                                "A is 23.5% faster per iteration (1.3 ms in A vs 1.7 ms in B)")
    assert d.verdict.endswith("within the iteration spread (±0.4 ms)")
    assert "iteration counts differ: A 4, B 8" in d.notes


def test_findings_peer_wait_and_blocking_sync_from_other_analyses():
    a, b = schedule(False, [0, 0]), schedule(True, [0, 0])
    ra, rb = (analyze(t, diagnose=False, cross_rank=False) for t in (a, b))
    d = diff_reports(ra, rb, a, b)
    assert d.findings["status"] == "not analyzed"
    assert {"findings", "peer_wait_ns", "blocking_sync_ns"} <= set(d.not_analyzed)
    ra.extra["findings"] = [{"id": "host-blocking-sync", "severity": "critical", "ranks": [0], "title": "r0 syncs"},
                            {"id": "host-blocking-sync", "severity": "critical", "ranks": [1], "title": "r1 syncs"},
                            {"id": "launch-bound-gaps", "severity": "info", "ranks": [1], "title": "gaps"},
                            {"id": "serialized-streams", "severity": "info", "ranks": [0, 1], "title": "serial"}]
    rb.extra["findings"] = [{"id": "launch-bound-gaps", "severity": "info", "ranks": [1], "title": "gaps"},
                            {"id": "serialized-streams", "severity": "info", "ranks": [1], "title": "serial"},
                            {"id": "late-peer", "severity": "warning", "ranks": [1, 0], "title": "rank 1 late"}]
    ra.extra["syncs"] = pd.DataFrame({"api": ["cudaStreamSynchronize"] * 2, "host_blocked_ns": [2 * U, 3 * U]})
    rb.extra["syncs"] = {"blocking_sync_ns": 0}
    # as analyzers.crossrank's report carries it: per rank totals
    rb.extra["cross_rank"] = {"collectives": [{"total_wait_ns": 9 * U}],
                              "peer_wait": {"0": {"wait_ns": U, "transfer_ns": 5 * U}, "1": {"wait_ns": 2 * U}}}
    d = diff_reports(ra, rb, a, b)
    assert [f["title"] for f in d.findings["only_a"]] == ["r0 syncs", "r1 syncs"]
    assert [f["id"] for f in d.findings["only_b"]] == ["late-peer"]
    assert d.findings["both"] == ["launch-bound-gaps", "serialized-streams"]
    assert d.findings["ranks_differ"] == [{"id": "serialized-streams", "ranks_a": [0, 1], "ranks_b": [1]}]
    bs = agg(d, "blocking_sync_ns")
    assert (bs["a"], bs["b"], bs["delta"], bs["rel"]) == (5 * U, 0, -5 * U, -1.0)
    pw = agg(d, "peer_wait_ns")
    assert math.isnan(pw["a"]) and pw["b"] == 3 * U
    assert d.not_analyzed == []


def test_analyze_sections_host_sync_vs_sync_before_loop():
    # the host-sync variant: a cudaStreamSynchronize per step blocks 10.25U and leaves the GPU idle U/10
    a, b = schedule(False, [0, 0, 0], host_sync=True), schedule(True, [0, 0, 0])
    ra, rb = analyze(a), analyze(b)  # metrics, cross-rank, blocking syncs, findings
    d = diff_reports(ra, rb, a, b, ("host-sync", "sync-before-loop"))
    assert d.findings["status"] == "analyzed" and d.not_analyzed == []
    assert {f["id"] for f in d.findings["only_a"]} == {"host-blocking-sync"}
    assert {r for f in d.findings["only_a"] for r in f["ranks"]} == {0, 1}
    bs = agg(d, "blocking_sync_ns")  # 2 ranks x 3 steps x 10.25U
    assert (bs["a"], bs["b"]) == (61.5 * U, 0)
    assert agg(d, "peer_wait_ns")["delta"] == 0  # both ranks start every collective together
    assert d.verdict == ("sync-before-loop hides 80.0 points more communication (overlap 0.0% -> 80.0%) and is "
                         "38.4% faster per iteration (2.11 -> 1.3 ms), beyond the iteration spread (±0 ms)")
    quick = diff_reports(*(analyze(t, diagnose=False) for t in (a, b)), a, b)
    assert quick.findings["status"] == "not analyzed" and "blocking_sync_ns" in quick.not_analyzed
    assert "peer_wait_ns" not in quick.not_analyzed  # the cross-rank analysis still ran


def test_section_total_shapes():
    paths = (("x_ns",), ("per_rank", "*", "wait_ns"), ("*", "host_blocked_ns"))
    assert section_total(None, paths) is None
    assert section_total({"x_ns": 7}, paths) == 7.0
    assert section_total({"x_ns": {"0": 3, "1": 4}}, paths) == 7.0
    assert section_total({"per_rank": {"0": {"wait_ns": 3}, "1": {"wait_ns": 4, "other": 9}}}, paths) == 7.0
    assert section_total([{"host_blocked_ns": 1}, {"host_blocked_ns": 2}, {}], paths) == 3.0
    assert section_total(pd.DataFrame({"host_blocked_ns": [5, 6]}), paths) == 11.0
    per_rank = {0: pd.DataFrame({"host_blocked_ns": [5]}), 1: pd.DataFrame({"host_blocked_ns": [1, 2]})}
    assert section_total(per_rank, paths) == 8.0  # report.syncs as analyze() attaches it
    assert section_total({"other": 1}, paths) is None


def test_kernels_matched_by_normalized_name_with_deltas():
    a = schedule(False, [0, 0], add_kernel=ADD4)
    b = schedule(False, [0, 0], add_kernel=ADD2, extra_gemms=1)  # vector width differs; one more gemm per step
    _, _, d = both(a, b)
    k = d.kernels.set_index("name")
    add = "at::native::vectorized_elementwise_kernel<at::native::CUDAFunctor_add, at::detail::Array>"
    assert k.loc[add, "presence"] == "both" and k.loc[add, "count_delta"] == 0
    g = k.loc[GEMM]  # per rank: 2 steps x (1 -> 2) gemms of 10U and 1U
    assert (g["count_a"], g["count_b"], g["count_delta"]) == (2, 4, 2)
    assert (g["total_ns_a"], g["total_ns_b"], g["total_ns_delta"]) == (20 * U, 22 * U, 2 * U)
    assert (g["mean_ns_a"], g["mean_ns_b"]) == (10 * U, 5.5 * U)
    assert d.kernels["name"].iloc[0] == GEMM  # largest |total delta| first
    _, _, raw = both(a, b, kernel_names="raw")
    assert set(raw.kernels["presence"]) == {"both", "only A", "only B"}
    assert any(n.startswith("kernel names (raw): 1 only in A, 1 only in B") for n in raw.notes)


def test_different_rank_counts_and_step_numbers_are_noted():
    a = schedule(False, [0, 0, 0], ranks=2)
    b = schedule(True, [0, 0], ranks=1, first_step=7)
    _, _, d = both(a, b)
    assert d.rank_pairs == [(0, 0)] and d.aggregation == "mean per rank"
    assert "rank counts differ: A 2, B 1 (aggregated times are means per rank)" in d.notes
    assert "world sizes differ: A 2, B 1" in d.notes
    assert "iteration counts differ: A 3, B 2" in d.notes
    assert d.verdict.endswith("but the runs differ in structure (see notes)")
    ex = agg(d, "exposed_comm_ns")  # per rank: A 3 steps x 10U, B 2 steps x 2U
    assert (ex["a"], ex["b"]) == (30 * U, 4 * U)


def test_pair_ranks():
    assert pair_ranks([0, 1], [1, 0]) == ([(0, 0), (1, 1)], [])
    pairs, notes = pair_ranks([0, 1, 2], [1, 2, 3])
    assert pairs == [(1, 1), (2, 2)] and "only in A: 0" in notes[0] and "only in B: 3" in notes[0]
    pairs, notes = pair_ranks([3], [1])
    assert pairs == [(3, 1)] and "compared in order (3↔1)" in notes[0]


def test_aligned_timelines_start_both_variants_at_the_common_step():
    a = schedule(False, [0, 0, 0], rank_offset=U, first_step=1)  # steps 1-3, rank 1 starts 1U later
    b = schedule(True, [0, 0, 0], first_step=2)  # steps 2-4
    df = aligned_timelines(a, b, labels=("A", "B"))
    al = df.attrs["alignment"]
    assert (al["step_a"], al["step_b"], al["how"]) == (2, 2, "iteration start")
    first = df[(df["step"] == 2) & (df["category"] == "comm")].groupby(["variant", "rank"])["start_ns"].min()
    assert first.to_dict() == {("A", 0): 0, ("A", 1): U, ("B", 0): 0, ("B", 1): 0}
    assert set(df.columns) >= {"variant", "rank", "stream", "start_ns", "end_ns", "category", "name"}
    assert len(df) == sum(len(t.gpu) for t in a) + sum(len(t.gpu) for t in b)
    earliest = df.groupby("variant")["start_ns"].min().to_dict()
    assert earliest == {"A": -21 * U, "B": 0}  # A's step 1 lies before the common step 2; B starts there
    only = aligned_timelines(a, b, step=3, only_step=True)
    assert set(only["step"]) == {3} and only.groupby("variant")["start_ns"].min().to_dict() == {"A": 0, "B": 0}
    with pytest.raises(ValueError, match="step 1 is not in both sets"):
        aligned_timelines(a, b, step=1)


def test_aligned_timelines_without_steps_use_first_activity():
    a = TraceSet(ranks={0: rank_trace([(50, 60, 1, COMM), (55, 70, 0, GEMM)])}, fmt="synthetic")
    b = TraceSet(ranks={0: rank_trace([(900, 910, 1, COMM)])}, fmt="synthetic")
    df = aligned_timelines(a, b)
    assert df.attrs["alignment"]["how"] == "first GPU activity"
    assert df.groupby("variant")["start_ns"].min().to_dict() == {"A": 0, "B": 0}


def test_compare_many_for_sweep():
    sets = {"serialized": schedule(False, [0, 0]), "overlapped": schedule(True, [0, 0]),
            "gappy": schedule(True, [4 * U, 4 * U])}
    reports = {k: analyze(v) for k, v in sets.items()}
    df = compare_many(reports, "serialized").set_index("variant")
    assert df.loc["serialized", "speedup_vs_baseline"] == 1.0 and df.loc["serialized", "is_baseline"]
    assert math.isclose(df.loc["overlapped", "speedup_vs_baseline"], 21 / 13)
    assert math.isclose(df.loc["overlapped", "overlap_points_vs_baseline"], 80.0)
    # gappy: the first step's window runs to the next step's first kernel (13U + 4U), the last ends at its kernels
    assert df.loc["gappy", "iteration_ns_median"] == 15 * U and df.loc["gappy", "iteration_ns_worst"] == 17 * U
    assert list(df.index) == ["serialized", "overlapped", "gappy"]
    with pytest.raises(KeyError):
        compare_many(reports, "nope")
    md = render_diff.sweep_markdown(compare_many(reports, "serialized"))
    assert "| serialized (baseline) | 0.0% |" in md and "| overlapped | 80.0% |" in md
    assert f"{21 / 13:.2f}×" in md and "+80.0 pt" in md


def test_compare_many_names_the_worst_rank():
    # rank 0: comm 0-10 fully under a GEMM (1.0); rank 1: GEMM only from 5 (0.5); pooled 15/20
    uneven = TraceSet(ranks={0: rank_trace([(0, 10 * U, 1, COMM), (0, 10 * U, 0, GEMM)]),
                             1: rank_trace([(0, 10 * U, 1, COMM), (5 * U, 10 * U, 0, GEMM)])}, fmt="synthetic")
    table = compare_many({"uneven": analyze(uneven)}, "uneven")
    row = table.set_index("variant").loc["uneven"]
    assert row["overlap_ratio"] == 0.75 and row["overlap_ratio_rank_min"] == 0.5
    assert "| uneven (baseline) | 75.0% | 50.0% |" in render_diff.sweep_markdown(table)


def test_options_restrict_the_kernel_table_to_the_chosen_steps():
    a, b = schedule(False, [0, 0, 0]), schedule(True, [0, 0, 0])
    opts = AnalysisOptions(steps=StepSelection.parse("2"))
    ra, rb = analyze(a, opts), analyze(b, opts)
    d = diff_reports(ra, rb, a, b, options=opts)
    assert d.kernels.set_index("name").loc["ncclDevKernel_AllGather_RING_LL", "count_a"] == 1  # one step per rank
    assert agg(d, "iteration_ns_median")["a"] == 21 * U


def test_json_is_plain_and_complete():
    a, b = schedule(False, [0, 0]), schedule(True, [0, 0])
    _, _, d = both(a, b)
    doc = json.loads(json.dumps(d.to_dict()))
    assert doc["verdict"] == d.verdict and doc["labels"] == ["A", "B"]
    assert {r["metric"] for r in doc["aggregate"]} >= {"overlap_ratio", "exposed_comm_ns", "iteration_ns_median",
                                                         "iteration_ns_worst", "spread_ns"}
    assert doc["kernels"][0]["name"] and "count_delta" in doc["kernels"][0]


# ---------------------------------------------------------------- real traces

def test_hta_pair_of_different_jobs(hta_dir):
    ta = load_traces([hta_dir / "trace_diff_control.json.gz"])
    tb = load_traces([hta_dir / "trace_diff_test.json.gz"])
    ra, rb = analyze(ta), analyze(tb)
    d = diff_reports(ra, rb, ta, tb, ("control", "test"))
    text = "\n".join(d.notes)
    assert "ranks differ (A has 3, B has 1)" in text
    assert "world sizes differ: A 8, B 2" in text
    assert "GPU models differ" in text and "A100" in text and "V100" in text
    assert "iteration structure differs" in text
    ov = agg(d, "overlap_ratio")
    assert ov["a"] == ra.ranks[0].overlap_ratio and ov["b"] == rb.ranks[0].overlap_ratio
    assert d.verdict.startswith("test hides") and d.verdict.endswith("(see notes)")
    same = diff_reports(ra, ra, ta, ta)
    assert same.verdict == IDENTICAL


def test_cli_diff_formats_and_errors(hta_dir, tmp_path):
    a, b = str(hta_dir / "trace_diff_control.json.gz"), str(hta_dir / "trace_diff_test.json.gz")
    timeline = tmp_path / "aligned.csv"
    r = cli("diff", a, b, "--labels", "control,test", "-f", "json", "--timeline", str(timeline))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["labels"] == ["control", "test"] and doc["verdict"].startswith("test hides")
    assert doc["findings"]["status"] == "analyzed" and "blocking_sync_ns" not in doc["not_analyzed"]
    assert "peer wait needs two or more ranks on each side" in doc["notes"]
    with timeline.open() as fh:
        rows = list(csv.DictReader(fh))
    assert {row["variant"] for row in rows} == {"control", "test"} and "written to" in r.stderr
    md = cli("diff", a, b, "-f", "md", "--top", "3")
    assert md.returncode == 0 and "**verdict:**" in md.stdout and "| metric | A | B | Δ | Δ% |" in md.stdout
    assert "GPU models differ" in md.stdout
    table = cli("diff", a, a)
    assert table.returncode == 0 and "verdict: identical" in table.stdout
    quick = json.loads(cli("diff", a, b, "--no-diagnose", "-f", "json").stdout)
    assert quick["findings"]["status"] == "not analyzed" and "blocking_sync_ns" in quick["not_analyzed"]
    assert cli("diff", a, b, "--labels", "onlyone").returncode == 2
    bad = cli("diff", a, str(tmp_path / "missing.json"))
    assert bad.returncode == 3 and "no such file" in bad.stderr and "Traceback" not in bad.stderr


def test_cli_run_directories_with_manifest(hta_dir, tmp_path):
    import shutil

    for variant in ("host-sync", "sync-before-loop"):
        d = tmp_path / variant
        d.mkdir()
        for r in (0, 1):
            shutil.copy(hta_dir / f"trace_filter_sampled_rank-{r}.json.gz", d / f"rank{r}.json.gz")
        (d / "manifest.json").write_text(json.dumps({"algo": "ag-gemm", "variant": variant}))
    r = cli("diff", str(tmp_path / "host-sync"), str(tmp_path / "sync-before-loop"), "-f", "json", "--no-diagnose")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["labels"] == ["host-sync", "sync-before-loop"] and doc["verdict"] == IDENTICAL
    assert [Path(s).name for s in doc["sources"]["host-sync"]] == ["rank0.json.gz", "rank1.json.gz"]


AG_GEMM = ROOT / "sample_traces" / "ag-gemm"


def test_ag_gemm_host_sync_vs_sync_before_loop():
    r = cli("diff", str(AG_GEMM / "host-sync"), str(AG_GEMM / "sync-before-loop"), "-f", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    rows = {x["metric"]: x for x in doc["aggregate"]}
    assert rows["overlap_ratio"]["delta"] > 0  # overlap gained
    assert rows["iteration_ns_median"]["delta"] < 0  # time saved
    assert doc["verdict"].startswith("sync-before-loop hides")
    assert "host-blocking-sync" in {f["id"] for f in doc["findings"]["only_a"]}
    assert rows["blocking_sync_ns"]["a"] > 0 and rows["blocking_sync_ns"]["delta"] < 0
    same = cli("diff", str(AG_GEMM / "host-sync"), str(AG_GEMM / "host-sync"), "-f", "json")
    assert json.loads(same.stdout)["verdict"] == IDENTICAL


def test_timeline_file_is_never_clobbered(tmp_path, hta_dir, capsys):
    from overlapscope.cli import main

    a, b = str(hta_dir / "trace_filter_sampled_rank-0.json.gz"), str(hta_dir / "trace_filter_sampled_rank-1.json.gz")
    target = tmp_path / "timeline.csv"
    target.write_text("my earlier plot data\n")
    assert main(["diff", a, b, "--timeline", str(target), "-f", "json"]) == 2
    err = capsys.readouterr().err
    assert "the file exists; pass --overwrite" in err and str(target) in err and err.strip().count("\n") == 0
    assert target.read_text() == "my earlier plot data\n"
    assert main(["diff", a, b, "--timeline", str(tmp_path / "no" / "such" / "dir.csv"), "-f", "json"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["diff", a, b, "--timeline", str(target), "--overwrite", "-f", "json"]) == 0
    lines = target.read_text().splitlines()
    assert lines[0] == "variant,rank,device,stream,start_ns,end_ns,step,category,kind,name" and len(lines) > 100
