"""`analyze --tables DIR`: the detail the compact JSON leaves out, as Parquet tables that agree with it."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd

from analyzers.io.load import load_traces
from analyzers.report import analyze
from overlapscope.write_tables import report_tables

from .conftest import ROOT, SAMPLES

SET = SAMPLES / "ag-gemm" / "host-sync"


def test_tables_hold_the_detail_the_document_leaves_out():
    rep = analyze(load_traces([SET]))
    doc = rep.to_dict()
    tabs = report_tables(rep)
    assert set(tabs) == {"ranks", "iterations", "collectives", "collective_ranks", "stragglers", "syncs",
                         "critical_rows", "critical_steps", "collective_activities", "findings", "streams",
                         "stream_pairs", "collective_groups", "order_checks", "stream_roles"}
    # every stream of every rank, and each pair once; the document's groups per rank and order checks, all of them
    assert tabs["streams"]["busy_ns"].tolist() == [s["busy_ns"] for d in doc["ranks"] for s in d["streams"]]
    for d in doc["ranks"]:
        pairs = tabs["stream_pairs"][tabs["stream_pairs"]["rank"] == d["rank"]]
        m = d["stream_pair_overlap_ns"]
        n = len(m["streams"])
        assert len(pairs) == n * (n + 1) // 2 and pairs["overlap_ns"].tolist() == [
            m["matrix"][i][j] for i in range(n) for j in range(i, n)]
    assert tabs["collective_groups"]["n"].tolist() == [g["n"] for g in doc["collectives"]["per_rank"]]
    assert tabs["stream_roles"]["role"].tolist() == [d["role"] for v in doc["cross_rank"]["stream_roles"].values()
                                                     for d in v]
    checks = doc["cross_rank"]["mismatch_summary"]["order_checks"]
    assert tabs["order_checks"]["swapped"].tolist() == [c["swapped"] for c in checks]
    assert tabs["findings"]["id"].tolist() == [f["id"] for f in doc["findings"]]
    assert len(tabs["collective_activities"]) == doc["collectives"]["n_rows"]
    # per-iteration rows: one per rank and step, the same as the report's
    its = tabs["iterations"]
    assert len(its) == sum(len(m.iterations) for m in rep.ranks)
    for m in rep.ranks:
        mine = its[its["rank"] == m.rank]
        assert mine["overlap_ns"].tolist() == m.iterations["overlap_ns"].tolist()
        assert "iterations" not in doc["ranks"][m.rank] and doc["ranks"][m.rank]["iteration_summary"]
    # per (collective, rank): the waits add up to each rank's peer-wait total
    cr = tabs["collective_ranks"]
    assert len(cr) == len(rep.cross_rank.members)
    for r, pw in rep.cross_rank.peer_wait.items():
        assert int(cr.loc[cr["rank"] == r, "wait_ns"].sum()) == pw["wait_ns"]
    assert int(cr["last"].sum()) == int((rep.cross_rank.collectives["late_rank"] >= 0).sum())
    # the collectives table and the document's list hold the same whole-collective columns
    assert list(tabs["collectives"].columns) == list(doc["cross_rank"]["collectives"][0])
    assert tabs["stragglers"]["n_last"].tolist() == [r["n_last"] for r in doc["stragglers"]["ranks"]]
    assert len(tabs["syncs"]) == doc["syncs"]["n"]
    # every critical activity of each rank, counted in the document
    crit = tabs["critical_rows"]
    assert {str(r): int(n) for r, n in crit.groupby("rank").size().items()} == doc["critical_path"]["critical_rows_n"]
    assert "critical_rows" not in doc["critical_path"]
    # every step's critical path (the document lists the slowest, with the count)
    steps = tabs["critical_steps"]
    cp = doc["critical_path"]
    assert len(steps) == cp["n_steps"] == len(cp["steps"])
    assert steps["step"].tolist() == [s["step"] for s in cp["steps"]]
    assert steps["compute_ns"].tolist() == [s["parts"]["compute"] for s in cp["steps"]]
    assert steps["walked_launch_gaps_ns"].tolist() == [s["walked"]["launch_gaps"] for s in cp["steps"]]
    assert steps["measured_ns"].tolist() == [s["measured_ns"] for s in cp["fidelity"]["steps"]]


def test_cli_writes_readable_parquet(tmp_path):
    out = tmp_path / "tables"
    r = subprocess.run([sys.executable, "-m", "overlapscope", "analyze", str(SET), "-f", "json", "--no-cache",
                        "--jobs", "1", "--tables", str(out)], cwd=ROOT, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{n}.parquet" for n in ("ranks", "iterations", "collectives", "collective_ranks", "stragglers", "syncs",
                                 "critical_rows", "critical_steps", "collective_activities", "findings", "streams",
                                 "stream_pairs", "collective_groups", "order_checks", "stream_roles"))
    assert pd.read_parquet(out / "findings.parquet")["title"].tolist() == [f["title"] for f in doc["findings"]]
    ranks = pd.read_parquet(out / "ranks.parquet")
    assert ranks["overlap_ratio"].tolist() == [x["overlap_ratio"] for x in doc["ranks"]]
    assert len(pd.read_parquet(out / "collectives.parquet")) == doc["cross_rank"]["n_matched"]


def _merged(rep) -> pd.DataFrame:
    """collective_ranks as one left merge of the whole members table with its lateness."""
    from analyzers.crossrank.stragglers import lateness

    cr = rep.cross_rank
    lat = lateness(cr.collectives, cr.members)
    return cr.members.merge(lat[["coll_id", "rank", "lateness_ns", "last"]], on=["coll_id", "rank"], how="left")


def test_collective_ranks_written_in_chunks_is_the_whole_merge(tmp_path, monkeypatch):
    """Written a few rows at a time, the file holds what one merge of the whole table makes; also where the
    first chunk's collectives have unknown peers (no lateness: NaN, `last` missing) and later ones do not."""
    from overlapscope import write_tables as wt

    rep = analyze(load_traces([SET]))
    monkeypatch.setattr(wt, "CHUNK_ROWS", 7)
    for unknown in (False, True):
        if unknown:
            colls = rep.cross_rank.collectives
            first_ids = rep.cross_rank.members["coll_id"].iloc[:9].unique()
            colls.loc[colls["coll_id"].isin(first_ids), "peers_known"] = False
        want = _merged(rep)
        assert len(want) > 3 * wt.CHUNK_ROWS and want["lateness_ns"].isna().any() == unknown
        out = tmp_path / f"t{int(unknown)}"
        wt.write_tables(rep, out)
        got = pd.read_parquet(out / "collective_ranks.parquet")
        ref = tmp_path / f"ref{int(unknown)}.parquet"
        wt._plain_columns(want).to_parquet(ref, index=False)  # as one whole table was written
        pd.testing.assert_frame_equal(got, pd.read_parquet(ref), check_exact=True)
        pd.testing.assert_frame_equal(wt.report_tables(rep)["collective_ranks"], want, check_exact=True)


def test_document_lists_at_most_32_findings_of_each_kind_and_the_tables_all():
    from analyzers.findings.finding import Finding, listed_findings, listed_findings_note
    from analyzers.report import AnalysisReport

    many = [Finding("launch-bound-gaps", "warning", [r], f"rank {r}", "x", saving_ns=1000 - r) for r in range(40)]
    few = [Finding("late-peer", "critical", [0, 1], "late", "y")]
    listed = listed_findings(many + few)
    assert [f.ranks[0] for f in listed[:32]] == list(range(32)) and listed[32:] == few  # order kept, 32 + 1
    assert listed_findings_note(many + few) == ["findings: 41 found; the document lists at most 32 of each kind, "
                                                "8 left out (every finding: analyze --tables DIR, findings.parquet)"]
    assert listed_findings(many[:32] + few) == many[:32] + few and listed_findings_note(many[:32]) == []
    rep = AnalysisReport("set", "kineto", 40, [], [], findings=many + few)
    doc = rep.to_dict()
    assert len(doc["findings"]) == 33 and doc["notes"] == listed_findings_note(many + few)
    tabs = report_tables(rep)
    assert len(tabs["findings"]) == 41 and tabs["findings"]["saving_ns"].tolist()[:3] == [1000, 999, 998]


def test_document_lists_the_busiest_streams_and_the_tables_all():
    from analyzers.overlap.metrics import PAIR_STREAMS_LISTED, STREAMS_LISTED, rank_metrics

    from .synth import GEMM, rank_trace

    # 40 streams, stream s busy 1000 * (s + 1) ns, none beside another: the busiest are the highest streams
    n = 40
    t = rank_trace([(10_000_000 * s, 10_000_000 * s + 1000 * (s + 1), s, GEMM) for s in range(n)])
    m = rank_metrics(t)
    d = m.to_dict(iterations=False)
    assert d["n_streams"] == n and [s["stream"] for s in d["streams"]] == list(range(n - STREAMS_LISTED, n))
    pairs = d["stream_pair_overlap_ns"]
    assert pairs["n_pair_streams"] == n and pairs["streams"] == list(range(n - PAIR_STREAMS_LISTED, n))
    assert pairs["matrix"][0][0] == 1000 * (n - PAIR_STREAMS_LISTED + 1) and pairs["matrix"][0][1] == 0
    full = m.to_dict()  # the plain form keeps every stream
    assert len(full["streams"]) == n and "n_streams" not in full
