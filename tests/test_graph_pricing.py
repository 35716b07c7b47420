"""The critical path and the findings' prices side by side (analyzers/graph/pricing.py): the same figures
as one after the other, whether the fixes' replays ran in a forked process, or that process died."""

from __future__ import annotations

import os
import time
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


def _watch_removals(monkeypatch) -> tuple[list[list[str]], list[int]]:
    """The removals replayed here, and the no-joins replays adopted from the forked process (their sizes)."""
    here: list[list[str]] = []
    adopted: list[int] = []
    prepare, adopt = pricing.prepare_removals, pricing.adopt_no_peer_wait
    monkeypatch.setattr(pricing, "prepare_removals", lambda run, parts: (here.append(list(parts)), prepare(run, parts)))
    monkeypatch.setattr(pricing, "adopt_no_peer_wait", lambda run, inp, rp: (adopted.append(len(rp.end)),
                                                                             adopt(run, inp, rp)))
    return here, adopted


def test_each_removal_is_replayed_once_here_or_in_the_forked_process(monkeypatch):
    rep = analyze(load_traces([ROOT / "sample_traces/ag-gemm/host-sync"]))
    ids = rep.finding_ids()
    serial = _answers(rep.graph_run, ids, False)
    here, adopted = _watch_removals(monkeypatch)
    assert _answers(rep.graph_run, ids, True) == serial
    # this set's walks charge exposed transfer, peer wait and launch gaps, which no finding's fix removes:
    # each replayed once, here or there (the no-joins replay of peer wait coming back here)
    mine = [p for parts in here for p in parts]
    assert len(mine) == len(set(mine)) and set(mine) <= {"comm_transfer", "peer_wait", "launch_gaps"}
    assert adopted == ([] if "peer_wait" in mine else [rep.graph_run.sg.n])


def _no_replays(_fixes: list) -> dict:
    return {}


def test_a_free_forked_process_takes_every_other_removal(monkeypatch):
    rep = analyze(load_traces([ROOT / "sample_traces/ag-gemm/host-sync"]))
    ids = rep.finding_ids()
    serial = _answers(rep.graph_run, ids, False)
    here, adopted = _watch_removals(monkeypatch)
    monkeypatch.setattr(pricing, "_replay_here", _no_replays)  # free at once (its fixes are replayed here)
    section = pricing.critical_path_section

    def after_a_while(run, before):  # the walks take longer than the child's fork and answer
        time.sleep(0.5)
        return section(run, before)

    monkeypatch.setattr(pricing, "critical_path_section", after_a_while)
    assert _answers(rep.graph_run, ids, True) == serial
    # a run made elsewhere gives no replay time: the removals alternate, the first there (exposed transfer and
    # launch gaps, whose replays come back with the fixes'), the second here (peer wait's no-joins replay)
    assert here == [["peer_wait"]]
    assert adopted == []
