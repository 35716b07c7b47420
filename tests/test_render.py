"""The CLI's table, Markdown and CSV are drawn from the analysis document alone, section by section
(overlapscope/render.py SECTIONS): what a new section registers is drawn where its key is present."""

from __future__ import annotations

import msgspec
import pytest
from rich.console import Console

from analyzers.io.load import load_traces
from analyzers.report import analyze
from overlapscope import render
from overlapscope.render_json import report_json
from viz.safe_text import markdown_text

from .conftest import ROOT


@pytest.fixture(scope="module")
def doc() -> dict:
    traces = load_traces([ROOT / "sample_traces" / "ag-gemm" / "host-sync"])
    return msgspec.json.decode(report_json(analyze(traces)))


def table_text(doc: dict, streams: bool = False) -> str:
    console = Console(record=True, width=200)
    render.print_table(doc, console, streams=streams)
    return console.export_text()


def test_every_part_of_the_document_is_drawn(doc):
    text = table_text(doc)
    for title in ("overlap —", "Clock alignment", "Peer wait per rank", "blocking host syncs", "findings"):
        assert title in text
    assert all(f["id"] in text for f in doc["findings"])
    assert "rank 0 streams" in table_text(doc, streams=True) and "rank 0 streams" not in text
    md = render.to_markdown(doc)
    assert md.startswith(f"### overlap — {markdown_text(doc['label'])}") and "## Cross-rank" in md and "**Fix:**" in md
    csv = render.to_csv(doc).splitlines()
    assert csv[0].split(",") == render.CSV_FIELDS and len(csv) == 1 + len(doc["ranks"])


def test_a_section_is_drawn_only_where_its_key_is_present(doc, monkeypatch):
    section = render.DocSection("straggler_demo", lambda d, opts: [f"demo: {d['straggler_demo']['n']} ranks"],
                                lambda d: f"### demo\n\n{d['straggler_demo']['n']} ranks")
    monkeypatch.setattr(render, "SECTIONS", [*render.SECTIONS, section])
    assert "demo:" not in table_text(doc) and "### demo" not in render.to_markdown(doc)
    with_key = {**doc, "straggler_demo": {"n": 3}}
    assert "demo: 3 ranks" in table_text(with_key) and "### demo\n\n3 ranks" in render.to_markdown(with_key)
    assert "demo:" not in table_text({**doc, "straggler_demo": None})


def test_an_undiagnosed_document_leaves_its_sections_out(doc):
    bare = {**doc, "syncs": None, "findings": None, "cross_rank": None}
    text = table_text(bare)
    assert "overlap —" in text and "findings" not in text and "Clock alignment" not in text
