"""The findings catalogue in README.md and docs/findings.md matches the registry, so they cannot drift.

The catalogue tables are generated from analyzers/findings/registry.py: after changing a
finding's ENTRY, run `python -m tests.test_catalogue` to rewrite them. Each finding's parameter
table in docs/findings.md is hand-placed in its section but checked here against its Params.
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from analyzers.findings import CATALOGUE, CROSS_RANK_FINDINGS, FINDINGS, RANK_FINDINGS, FindingParams
from analyzers.findings.view import SharedParams

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs" / "findings.md"
BEGIN = "<!-- catalogue: generated from analyzers/findings/registry.py by `python -m tests.test_catalogue` -->"
END = "<!-- end of catalogue -->"
# How docs/findings.md shows defaults too long or too cryptic for a table cell.
DOC_DEFAULTS = {"copy_kernel_pattern": "see `DEFAULT_COPY_KERNEL_PATTERN`", "step_pattern": "`ProfilerStep#N`"}
PARAM_ROW = re.compile(r"^\| `(\w+)` \| (.*?) \| (.*) \|$")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def readme_table() -> str:
    rows = ["| id | what it detects | known fix |", "|---|---|---|"]
    rows += [f"| {f.ENTRY.id} | {_cell(f.ENTRY.summary)} | {_cell(f.ENTRY.summary_fix)} |" for f in FINDINGS]
    return "\n".join(rows)


def docs_table() -> str:
    rows = ["| id | what it detects | known fix | stays silent on (look-alikes) |", "|---|---|---|---|"]
    rows += [f"| `{f.ENTRY.id}` | {_cell(f.ENTRY.detects)} | {_cell(f.ENTRY.fix)} | {_cell(f.ENTRY.look_alikes)} |"
             for f in FINDINGS]
    return "\n".join(rows)


def generated_block(path: Path) -> str:
    text = path.read_text()
    assert BEGIN in text and END in text, f"{path.name}: catalogue markers missing"
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip("\n")


def rewrite(path: Path, table: str) -> None:
    text = path.read_text()
    a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
    path.write_text(text[:a] + "\n" + table + "\n" + text[b:])


def sections(text: str) -> dict[str, str]:
    """'## heading' -> the text under it (to the next '## ')."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def param_rows(text: str) -> dict[str, tuple[str, str]]:
    return {m.group(1): (m.group(2), m.group(3)) for line in text.splitlines() if (m := PARAM_ROW.match(line))}


def doc_default(name: str, value: object) -> str:
    return DOC_DEFAULTS.get(name, str(value))


def test_registry_is_consistent():
    ids = [f.ENTRY.id for f in FINDINGS]
    assert len(ids) == len(set(ids)) and list(CATALOGUE) == ids
    assert set(RANK_FINDINGS) | set(CROSS_RANK_FINDINGS) == set(FINDINGS)
    assert not set(RANK_FINDINGS) & set(CROSS_RANK_FINDINGS)
    for f in FINDINGS:
        assert f.__name__.rsplit(".", 1)[1] == f.ENTRY.id.replace("-", "_"), "one module per finding, named by id"
        assert all(getattr(f.ENTRY, k).strip() for k in ("detects", "fix", "summary", "summary_fix", "look_alikes"))
    for f in RANK_FINDINGS:
        assert callable(f.detect) and issubclass(FindingParams, f.Params)
    for f in CROSS_RANK_FINDINGS:
        assert callable(f.detect_cross_rank)


def test_cli_finding_ids_match_registry():
    from overlapscope.finding_ids import FINDING_IDS

    assert FINDING_IDS == tuple(CATALOGUE), "overlapscope/finding_ids.py must list the registry's ids in its order"


def test_readme_catalogue_matches_registry():
    assert generated_block(README) == readme_table(), "README catalogue is stale: run python -m tests.test_catalogue"


def test_docs_catalogue_matches_registry():
    assert generated_block(DOCS) == docs_table(), "docs/findings.md catalogue is stale: python -m tests.test_catalogue"


def test_docs_have_a_section_per_finding_with_its_parameters():
    text = DOCS.read_text()
    by_heading = sections(text)
    for f in FINDINGS:
        heading = [h for h in by_heading if re.search(rf"\b{re.escape(f.ENTRY.id)}\b", h)]
        assert heading, f"docs/findings.md has no '## {f.ENTRY.id}' section"
    for f in RANK_FINDINGS:
        rows = param_rows(by_heading[f.ENTRY.id])
        expected = {x.name: (doc_default(x.name, x.default), FindingParams.field_docs()[x.name][1])
                    for x in fields(f.Params)}
        assert rows == expected, f"{f.ENTRY.id}: parameter table differs from {f.__name__}.Params"


def test_docs_list_every_threshold_once_with_its_default_and_why():
    rows = param_rows(DOCS.read_text())
    expected = {name: (doc_default(name, default), doc) for name, (default, doc) in FindingParams.field_docs().items()}
    assert rows == expected
    shared = {x.name for x in fields(SharedParams)} - {"sync"}
    assert shared <= set(rows)


def test_catalogue_check_sees_a_stale_row(tmp_path):
    stale = tmp_path / "README.md"
    stale.write_text(README.read_text().replace("| late-peer |", "| late-peers |"))
    assert generated_block(stale) != readme_table()


if __name__ == "__main__":
    rewrite(README, readme_table())
    rewrite(DOCS, docs_table())
    print("rewrote the catalogue tables of README.md and docs/findings.md")
