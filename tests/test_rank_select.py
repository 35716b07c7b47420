"""`--ranks` subsets: the selection parsed, files outside it skipped, missing ranks named."""

from __future__ import annotations

import json
import subprocess

import pytest

from analyzers.io.load import load_traces
from analyzers.io.rank_select import format_ranks, head_rank, parse_ranks, selection_notes

from . import inprocess
from .conftest import SAMPLES


def test_parse_and_format_ranges():
    assert parse_ranks("0-3, 512,1023") == frozenset({0, 1, 2, 3, 512, 1023})
    assert format_ranks([0, 1, 2, 3, 512, 1023, 7]) == "0-3, 7, 512, 1023"
    assert format_ranks(range(0, 100, 2), max_parts=3) == "0, 2, 4 and 47 more ranges"
    for bad in ("3-1", "a", "1,,2", "-1"):
        with pytest.raises(ValueError):
            parse_ranks(bad)


def test_notes_name_absent_ranks_and_coverage():
    notes = selection_notes(frozenset({0, 1, 9}), [0, 1], 8)
    assert notes[0] == "--ranks: no trace holds rank 9"
    assert "2 of 8 ranks analyzed (0-1)" in notes[1] and "cover only" in notes[1]


def _four_rank_set(tmp_path):
    """The 2-rank sample copied to ranks 0-3 of a world of 4 (distributedInfo rewritten, plain JSON)."""
    import gzip

    src = sorted((SAMPLES / "ag-gemm" / "host-sync").glob("rank*.json.gz"))
    for r in range(4):
        doc = json.loads(gzip.decompress(src[r % 2].read_bytes()))
        doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": r, "world_size": 4}
        (tmp_path / f"trace-{r}.json").write_text(json.dumps({"distributedInfo": doc.pop("distributedInfo"),
                                                               **doc}))
    return tmp_path


def test_subset_loads_only_the_ranks_asked_for(tmp_path):
    folder = _four_rank_set(tmp_path)
    assert head_rank(folder / "trace-2.json") == 2
    ts = load_traces([folder], ranks=frozenset({1, 3, 6}))
    assert ts.rank_ids() == [1, 3]
    assert "--ranks: no trace holds rank 6" in ts.notes
    assert any("2 of 4 ranks analyzed (1, 3)" in n for n in ts.notes)
    full = load_traces([folder])
    assert full.rank_ids() == [0, 1, 2, 3] and not any("ranks" in n for n in full.notes)


def test_missing_ranks_are_named(tmp_path):
    folder = _four_rank_set(tmp_path)
    (folder / "trace-1.json").unlink()
    (folder / "trace-2.json").unlink()
    ts = load_traces([folder])
    assert "2 of 4 ranks given; missing rank 1-2: cross-rank figures cover only the ranks given" in ts.notes


def test_cli_subset_and_bad_spec(tmp_path):
    folder = _four_rank_set(tmp_path)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return inprocess.cli("analyze", folder, *args)

    res = cli("--ranks", "0,2", "-f", "json", "--no-cache", "--jobs", "1")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [r["rank"] for r in doc["ranks"]] == [0, 2]
    assert any("cross-rank figures cover only these ranks" in n for n in doc["notes"])
    assert cli("--ranks", "2-0").returncode == 2
    none = cli("--ranks", "9", "--no-cache", "--jobs", "1")
    assert none.returncode == 3 and "no trace holds any of these ranks" in none.stderr
    assert none.stderr.count("\n") == 1
