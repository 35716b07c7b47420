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
    monkeypatch.setattr(pricing, "_replay_here", lambda _fixes: os._exit(3))  # the child dies at once
    assert _answers(rep.graph_run, ids, True) == serial


@pytest.mark.parametrize("parallel", [False, True])
def test_a_fix_that_prices_a_finding_and_removes_a_cause_is_replayed_once(monkeypatch, parallel):
    rep = analyze(load_traces([ROOT / "sample_traces/ag-gemm/host-sync"]))
    ids = rep.finding_ids()
    assert "host-blocking-sync" in ids  # its fix, host-syncs, is also the removal of the path's sync idle
    fresh = GraphRun(rep.graph_run.sg)
    made: list[tuple] = []
    run = GraphRun.run

    def counted(self, fixes):
        if "_replays" in self.__dict__ and tuple(fixes) not in self.__dict__["_replays"]:
            made.append(tuple(f.label for f in fixes))
        return run(self, fixes)

    monkeypatch.setattr(GraphRun, "run", counted)
    pricing.section_and_savings(fresh, ids, parallel)
    # serial: made once here, read by the charge and the price; forked: made in the child, read here
    assert made.count(("host-syncs",)) == (0 if parallel else 1)
    assert len(made) == len(set(made))



def test_the_forked_process_makes_removals_and_the_figures_stay_the_serial_ones(monkeypatch):
    rep = analyze(load_traces([ROOT / "sample_traces/ag-gemm/host-sync"]))
    ids = rep.finding_ids()
    serial = _answers(rep.graph_run, ids, False)
    here: list[list[str]] = []
    adopted: list[int] = []
    prepare, adopt = pricing.prepare_removals, pricing.adopt_no_peer_wait
    monkeypatch.setattr(pricing, "prepare_removals", lambda run, parts: (here.append(list(parts)), prepare(run, parts)))
    monkeypatch.setattr(pricing, "adopt_no_peer_wait", lambda run, inp, rp: (adopted.append(len(rp.end)),
                                                                             adopt(run, inp, rp)))
    assert _answers(rep.graph_run, ids, True) == serial
    # this set's walks charge exposed transfer and peer wait, which no finding's fix removes: the caller
    # replays the first, the child the other (the no-joins replay comes back to the caller)
    assert here == [["comm_transfer"]]
    assert adopted == [rep.graph_run.sg.n]
