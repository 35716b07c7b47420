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
    assert set(tabs) == {"ranks", "iterations", "collectives", "collective_ranks", "stragglers", "syncs"}
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


def test_cli_writes_readable_parquet(tmp_path):
    out = tmp_path / "tables"
    r = subprocess.run([sys.executable, "-m", "overlapscope", "analyze", str(SET), "-f", "json", "--no-cache",
                        "--jobs", "1", "--tables", str(out)], cwd=ROOT, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{n}.parquet" for n in ("ranks", "iterations", "collectives", "collective_ranks", "stragglers", "syncs"))
    ranks = pd.read_parquet(out / "ranks.parquet")
    assert ranks["overlap_ratio"].tolist() == [x["overlap_ratio"] for x in doc["ranks"]]
    assert len(pd.read_parquet(out / "collectives.parquet")) == doc["cross_rank"]["n_matched"]
