"""The docs say what the software does now: docs/cli.md is what the commands' --help says, and every example
block in README.md and docs/*.md is what its command prints today. `python -m docs.build` rewrites them.
"""

from __future__ import annotations

import re
import threading

import pytest
from typer.testing import CliRunner

from docs import build
from docs.cli_reference import cli_markdown, root_command, walk
from overlapscope.cli import app

from .inprocess import cli

LONG_OPTION = re.compile(r"(?<![\w-])--[a-zA-Z][\w-]*")
# a short option sits beside its long one at the start of a row of the Options panel
SHORT_OPTION = re.compile(r"^│\s+--[\w-]+\s+(-[a-zA-Z])\s", re.M)
COMMANDS = [path for path, _ in walk(root_command())]


def cli_page_section(path: tuple[str, ...]) -> str:
    text = build.CLI_PAGE.read_text()
    heading = f"## {' '.join(path)}\n"
    assert heading in text, f"docs/cli.md has no section for {' '.join(path)}: python -m docs.build"
    rest = text[text.index(heading) + len(heading):]
    return rest.split("\n## ", 1)[0]


def test_cli_page_is_what_the_commands_say():
    assert build.CLI_PAGE.read_text() == cli_markdown(), "docs/cli.md is stale: python -m docs.build"


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p[1:]) for p in COMMANDS])
def test_every_option_of_help_is_in_the_cli_page(path):
    shown = CliRunner().invoke(app, [*path[1:], "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"},
                               prog_name="overlapscope")
    assert shown.exit_code == 0, shown.output
    options = (set(LONG_OPTION.findall(shown.output)) | set(SHORT_OPTION.findall(shown.output))) - {"--help"}
    assert options or path[1:] in (("algorithms",), ("cache", "info"), ("cache", "clear"))
    section = cli_page_section(path)
    missing = sorted(o for o in options if not re.search(rf"(?<![\w-]){o}(?![\w-])", section))
    assert not missing, f"{' '.join(path)} --help names {missing}, docs/cli.md does not: python -m docs.build"


def test_every_marked_block_names_an_example_and_every_example_is_shown():
    shown = {name for page in build.pages() for name in build.blocks_in(page.read_text())}
    assert shown <= build.EXAMPLES.keys(), f"blocks with no command: {sorted(shown - build.EXAMPLES.keys())}"
    assert build.EXAMPLES.keys() <= shown, f"examples no page shows: {sorted(build.EXAMPLES.keys() - shown)}"


def test_the_check_sees_a_changed_block(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("intro\n<!-- begin: demo -->\nold output\n<!-- end: demo -->\nafter\n")
    want = build.rewritten(page.read_text(), {"demo": "new output\n"})
    assert want == "intro\n<!-- begin: demo -->\nnew output\n<!-- end: demo -->\nafter\n"
    monkeypatch.setattr(build, "ROOT", tmp_path)
    assert build.stale({page: want}) == ["page.md: block demo"]
    page.write_text(want)
    assert build.stale({page: want}) == []


def test_trim_keeps_the_named_sections_and_names_the_others():
    out = "head line\nfirst\n┏━┓\n│1│\nsecond (top 3)\n┏━┓\n│2│\nnote\nthird\n┌─┐\n│3│\n"
    assert build.trim(out, ("first", "third")) == (
        "head line\nfirst\n┏━┓\n│1│\n... (second) ...\nthird\n┌─┐\n│3│\n")


def in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """build.run_command's commands in the test process (tests/inprocess.py), one at a time, in the environment
    build._environment gives its subprocesses: the 15 commands then wait for their analyses, not 15 starts of
    Python and pandas. What a real process shows is tests/test_cli.py's; that build.run_command's subprocess
    prints the same is checked on one command below."""
    lock = threading.Lock()

    def run_command(argv: tuple[str, ...], cache_dir: str) -> str:
        with lock, monkeypatch.context() as env:
            for name in ("TTY_COMPATIBLE", "FORCE_COLOR", "COLUMNS"):
                env.delenv(name, raising=False)
            env.setenv("OVERLAPSCOPE_CACHE_DIR", cache_dir)
            env.setenv("NO_COLOR", "1")
            done = cli(*argv)
        if done.returncode != 0:
            raise RuntimeError(f"overlapscope {' '.join(argv)}: exit {done.returncode}: {done.stderr}")
        return done.stdout

    monkeypatch.setattr(build, "run_command", run_command)


def test_example_blocks_are_what_the_commands_print_now(monkeypatch, tmp_path):
    """Runs every example command on the bundled samples (slow: tests/tiers.py) and compares each block."""
    argv = ("diff", "sample_traces/ag-gemm/host-sync", "sample_traces/ag-gemm/sync-before-loop")
    assert any(e.argv == argv for e in build.EXAMPLES.values())
    from_a_process = build.run_command(argv, str(tmp_path))
    in_this_process(monkeypatch)
    assert build.run_command(argv, str(tmp_path / "cache")) == from_a_process
    stale = build.stale(build.generated())
    assert not stale, "stale docs (python -m docs.build rewrites them): " + "; ".join(stale)
