"""The critical path and the findings' prices side by side (analyzers/graph/pricing.py): the same figures
as one after the other, whether the fixes' replays ran in a forked process, or that process died."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import analyzers.graph.pricing as pricing
from analyzers.graph.analysis import GraphRun
from analyzers.io.load import load_traces
from analyzers.io.plain import to_json
from analyzers.report import analyze

ROOT = Path(__file__).resolve().parents[1]


def _answers(run: GraphRun, ids: list[str], parallel: bool) -> str:
    fresh = GraphRun(run.sg)  # its own replays: nothing carried over from another call
    section, savings = pricing.section_and_savings(fresh, ids, parallel)
    return to_json({"section": section, "savings": savings, "unsettled": fresh.unsettled})


@pytest.mark.parametrize("folder", ["sample_traces/ag-gemm/host-sync", "sample_traces/fsdp/zero3"])
def test_forked_pricing_gives_the_serial_figures(folder):
    rep = analyze(load_traces([ROOT / folder]))
    ids = rep.finding_ids()
    serial = _answers(rep.graph_run, ids, False)
    assert '"saving_ns"' in serial  # some finding was priced
    assert _answers(rep.graph_run, ids, True) == serial


def test_a_dead_pricing_process_is_redone_here(monkeypatch):
    rep = analyze(load_traces([ROOT / "sample_traces/ag-gemm/host-sync"]))
    ids = rep.finding_ids()
    serial = _answers(rep.graph_run, ids, False)
    monkeypatch.setattr(pricing, "_price_here", lambda _ids: os._exit(3))  # the child dies at once
    assert _answers(rep.graph_run, ids, True) == serial
