"""Names that try to inject into what the CLI prints and writes: terminal control
sequences and rich markup in tables, Markdown and HTML in `-f md`, formulas in every CSV, names in the HTML
report and its Plotly figures; temporary files a planted link could redirect; a report named like an option.

The hostile names ride on a copy of a bundled 2-rank run (tests/hostile_names.py) whose GEMM kernels a finding
names, in a folder whose name is hostile too. Each check states the class it guards, not one string.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import stat
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from viz.safe_text import (
    csv_cell,
    csv_frame,
    html_text,
    markdown_code,
    markdown_text,
    plotly_text,
    printable,
    terminal_text,
)

from .conftest import ROOT
from .hostile_names import (
    BIDI,
    C1_CSI,
    CONTROL,
    ESC_CLEAR_AND_TITLE,
    FORGED_ROWS,
    FORMULA,
    FORMULA_NAMES,
    HOSTILE_FOLDER,
    HOSTILE_KERNEL,
    IMAGE,
    LINK,
    MARKUP,
    RAW_HTML,
    hostile_run,
)

NAMES = [HOSTILE_KERNEL, HOSTILE_FOLDER, ESC_CLEAR_AND_TITLE, C1_CSI, BIDI, MARKUP, "[/]", "[bold", "x\\", FORGED_ROWS,
         RAW_HTML, IMAGE, LINK, ":smile: :material/home: :red[x] $x$", "`code` **b** _i_ ~s~ # h", *FORMULA_NAMES,
         "\x00\x07\x08\x7f\u2028\u200b\ufeff", "a" * 5000]
SGR = re.compile(r"\x1b\[[0-9;]*m")  # rich's own colours, the only escape sequence it writes in text
RICH_CURSOR = re.compile(r"\x1b\[\?25[lh]|\x1b\[2K|\x1b\[\d*A|\r")  # its progress bar's, on stderr


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("OVERLAPSCOPE_CACHE_DIR", str(cache))
    return cache


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hostile_run(tmp_path_factory.mktemp("hostile"))


def _cli(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "overlapscope", *args], cwd=cwd, capture_output=True, timeout=300,
                          env={**os.environ, **(env or {})}, **kw)


# --------------------------------------------------------------------------- the helpers, on every name


def _unescaped(text: str, chars: str) -> list[str]:
    """Characters of chars in Markdown text that no backslash escapes."""
    found, i = [], 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] in chars:
            found.append(text[i])
        i += 1
    return found


@pytest.mark.parametrize("name", NAMES, ids=range(len(NAMES)))
def test_markdown_text_leaves_nothing_markdown_or_html_would_read(name: str) -> None:
    md = markdown_text(name)
    assert "\n" not in md and "\r" not in md and not CONTROL.search(md)
    bare = re.sub(r"&#?\w+;", "", md)  # entities: text, the characters they stand for never read as syntax
    assert not _unescaped(bare, "|[]`*_~#$!<>&")  # no cell, link, image, code, emphasis, heading, math, tag
    assert "<" not in md and ">" not in md  # raw HTML is entities
    assert not re.search(r"(?i)[a-z0-9]://|\bwww\.|[\w.+-]@", md)  # no autolink (a word joiner breaks each)
    assert not re.search(r"(?<!\\):[\w+/-]+:", md)  # no emoji or icon code


def test_markdown_code_is_one_span_whatever_its_backticks() -> None:
    for text in ("a`b", "``x``", "`", RAW_HTML, FORGED_ROWS):
        span = markdown_code(text)
        fence = re.match(r"`+", span).group()
        assert span.endswith(fence) and fence not in span[len(fence):-len(fence)] and "\n" not in span


@pytest.mark.parametrize("name", NAMES, ids=range(len(NAMES)))
def test_terminal_text_is_shown_as_typed_and_never_raises(name: str) -> None:
    from rich.console import Console

    from viz.safe_text import text_only_console

    for console in (Console(file=io.StringIO(), force_terminal=True, width=300),
                    text_only_console(file=io.StringIO(), force_terminal=True, width=300)):
        console.print(f"[dim]{terminal_text(name)}[/dim]")  # a closing tag in a name raised MarkupError
        out = SGR.sub("", console.file.getvalue())
        assert not CONTROL.search(out), repr(out[:200])
    shown = SGR.sub("", console.file.getvalue())
    assert printable(name, keep_newlines=True).replace("\n", "") in shown.replace("\n", "")


def test_the_console_writes_out_controls_it_is_handed_raw() -> None:
    """The last guard: a rich Text or a markup=False line with an escape sequence still reaches the terminal
    as text (the CLI's consoles are made by text_only_console)."""
    from rich.text import Text

    from overlapscope.common import err_console, out_console
    from viz.safe_text import text_only_console

    console = text_only_console(file=io.StringIO(), force_terminal=True, width=200)
    console.print(Text(HOSTILE_KERNEL))
    console.print(ESC_CLEAR_AND_TITLE + C1_CSI, markup=False)
    console.print(":smile:")  # emoji codes are not read either
    out = SGR.sub("", console.file.getvalue())
    assert not CONTROL.search(out) and "\\x1b[2J" in out and ":smile:" in out
    assert type(out_console.console).__name__ == type(err_console.console).__name__ == type(console).__name__


@pytest.mark.parametrize("name", FORMULA_NAMES)
def test_a_csv_cell_never_starts_a_formula(name: str) -> None:
    cell = csv_cell(name)
    assert cell.startswith("'") or not cell.lstrip(" ").startswith(("=", "+", "-", "@", "\t", "\r")), cell
    assert not CONTROL.search(cell)


def test_numbers_stay_numbers_in_csv() -> None:
    for v in (-1, -2.5, 0, 3e-9, float("nan"), None, True):
        assert csv_cell(v) is v
    for text in ("-1.5", "+3", "1e-5", " -7 "):  # text that is a plain number is no formula: kept
        assert csv_cell(text) == text
    import pandas as pd

    frame = pd.DataFrame({"name": [FORMULA, "gemm", None, FORMULA], "ns": [-5, 6, 7, 8], "f": [-0.5, 1.0, 2.0, 3.0]})
    out = csv_frame(frame)
    assert out["name"].tolist()[:2] == ["'" + FORMULA, "gemm"] and out["name"].isna().tolist() == [False, False, True,
                                                                                                   False]
    assert out["ns"].tolist() == [-5, 6, 7, 8] and out["f"].tolist() == [-0.5, 1.0, 2.0, 3.0]
    assert frame["name"].tolist()[0] == FORMULA  # the caller's frame is untouched


def test_html_and_plotly_text_hold_no_tag_and_no_template() -> None:
    for name in NAMES:
        for text in (html_text(name), plotly_text(name)):
            assert "<" not in text and ">" not in text and not CONTROL.search(text.replace("\n", ""))
        assert "%{" not in plotly_text(name + "%{x}")


# --------------------------------------------------------------------------- the CLI on a hostile run


def _md_table_widths(md: str) -> list[int]:
    """Cells per row of every Markdown table (a row forged by | or a newline in a name changes the count)."""
    widths, table = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            table.append(len(_unescaped(line, "|")) - 1)
        elif table:
            widths.append(len(set(table)))
            table = []
    return widths


def test_analyze_prints_hostile_names_as_text_in_every_format(run_dir: Path) -> None:
    table = _cli("analyze", str(run_dir), "--no-cache", env={"FORCE_COLOR": "1", "COLUMNS": "250"})
    assert table.returncode == 0 and b"Traceback" not in table.stderr, table.stderr[-2000:]
    for stream in (table.stdout, table.stderr):
        text = RICH_CURSOR.sub("", SGR.sub("", stream.decode()))
        assert not CONTROL.search(text), repr(CONTROL.search(text))
    shown = SGR.sub("", table.stdout.decode())
    assert "\\x1b[2J" in shown and "run [/dim] |x| <b> =1+1 \\x1b[31m" in shown  # shown as typed, not read

    md = _cli("analyze", str(run_dir), "-f", "md")
    text = md.stdout.decode()
    assert md.returncode == 0 and "comm-starved-by-compute" in text and not CONTROL.search(text)
    assert set(_md_table_widths(text)) == {1}  # every table keeps one width: no forged row
    prose = re.sub(r"(`+).*?\1", "", text)  # code spans show their content as typed
    prose = re.sub(r"</?(details|summary)>", "", prose)  # the report's own collapsible part
    assert "<" not in prose and ">" not in prose
    assert "](" not in prose.replace("\\](", "") and not re.search(r"(?i)[a-z0-9]://|\bwww\.", prose)


def test_csv_outputs_neutralise_formulas(run_dir: Path, tmp_path: Path) -> None:
    """-f csv (its source cell a path the user gave), export --collectives-csv (process group names from the
    trace) and diff --timeline (kernel names): no cell a spreadsheet runs."""
    import gzip

    work = tmp_path / "work"
    work.mkdir()
    src = ROOT / "sample_traces" / "ag-gemm" / "baseline"
    for path in sorted(src.glob("rank*.json.gz")):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel":
                if str(e.get("name", "")).startswith("nccl"):
                    e.setdefault("args", {})["Process Group Name"] = FORMULA
                else:
                    e["name"] = FORMULA_NAMES[1]
        (work / f"=1+1 {path.stem}").write_text(json.dumps(doc))  # rank0.json: the name names the rank
    rows = list(csv.reader(io.StringIO(_cli("analyze", ".", "-f", "csv", cwd=work).stdout.decode())))
    assert len(rows) == 3 and all(r[1].startswith("'=1+1") or r[1].startswith(".") for r in rows[1:]), rows
    single = list(csv.reader(io.StringIO(_cli("analyze", "=1+1 rank0.json", "-f", "csv", cwd=work).stdout.decode())))
    assert single[1][1] == "'=1+1 rank0.json" and single[1][2].lstrip("-").isdigit()
    out = _cli("export", ".", "--collectives-csv", "c.csv", cwd=work)
    assert out.returncode == 0, out.stderr[-1500:]
    diff = _cli("diff", str(src), ".", "--timeline", "t.csv", cwd=work)
    assert diff.returncode == 0, diff.stderr[-1500:]
    for name in ("c.csv", "t.csv"):
        cells = [c for r in csv.reader((work / name).open()) for c in r]
        starts = [c for c in cells if c.lstrip(" ").startswith(("=", "+", "@", "\t", "\r"))]
        assert not starts, (name, starts[:3])
        assert any(c == "'" + FORMULA or c == "'" + FORMULA_NAMES[1] for c in cells), name  # kept, neutralised
        assert any(re.fullmatch(r"-?\d+(\.\d+)?", c) for c in cells)  # numbers as numbers


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, dict(attrs)))


def test_html_report_holds_names_as_text(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    done = _cli("export", str(run_dir), "--html", str(out))
    assert done.returncode == 0, done.stderr[-1500:]
    page = out.read_text()
    parser = _Tags()
    parser.feed(page)
    assert not [t for t, a in parser.tags if t == "img" or any(k.startswith("on") for k in a)]
    assert not [a for t, a in parser.tags if t == "a" and "evil" in a.get("href", "")]
    text = re.sub(r"<script.*?</script>", "", page, flags=re.S)  # plotly.js itself holds control bytes
    assert "&lt;img src=x onerror=alert" in text and not CONTROL.search(text)
    figures = re.findall(r"Plotly\.newPlot\([^;]*", page)
    assert figures and not any("<img" in f or "<a " in f or "\\u003cimg" in f for f in figures)


def test_diff_and_whatif_markdown_and_tables_hold_names_as_text(run_dir: Path) -> None:
    base = str(ROOT / "sample_traces" / "fsdp" / "zero3")
    for fmt in ("table", "md"):
        done = _cli("diff", base, str(run_dir), "-f", fmt, "--labels", f"{MARKUP}|a,{IMAGE}\nb")
        text = SGR.sub("", done.stdout.decode())
        assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr[-1500:]
        assert not CONTROL.search(text)
        if fmt == "md":
            assert set(_md_table_widths(text)) == {1} and "](" not in text.replace("\\](", "")
    fix = "drop=[/dim]|<img src=x>"
    for fmt in ("table", "md"):
        done = _cli("whatif", base, "--fix", fix, "-f", fmt)
        assert done.returncode in (0, 2) and b"Traceback" not in done.stderr, done.stderr[-1500:]
        if done.returncode == 0 and fmt == "md":
            assert "<img" not in done.stdout.decode()


# --------------------------------------------------------------------------- temporary files and options


def test_export_never_follows_a_planted_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A link planted under every name the old code could pick (.NAME.partial-PID.html) pointing at a victim:
    the export writes its own file, the victim is unchanged, nothing is left beside the output."""
    from overlapscope.cli import main

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "r.html"
    (out_dir / f".r.html.partial-{os.getpid()}.html").symlink_to(victim)
    (out_dir / "r.html.tmp").symlink_to(victim)
    code = main(["export", str(ROOT / "sample_traces" / "ag-gemm" / "baseline"), "--html", str(out)])
    assert code == 0 and victim.read_text() == "keep me" and out.stat().st_size > 10_000
    assert sorted(p.name for p in out_dir.iterdir()) == sorted([f".r.html.partial-{os.getpid()}.html", "r.html",
                                                                "r.html.tmp"])


def test_atomic_path_writes_in_a_private_folder_and_replaces_a_link_not_its_target(tmp_path: Path) -> None:
    from analyzers.io.atomic_write import atomic_path

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    target = tmp_path / "out.json"
    target.symlink_to(victim)
    with atomic_path(target) as tmp:
        folder = tmp.parent
        assert folder.parent == tmp_path and stat.S_IMODE(folder.stat().st_mode) == 0o700 and not tmp.exists()
        tmp.write_text("new")
    assert not target.is_symlink() and target.read_text() == "new" and victim.read_text() == "keep me"
    assert not folder.exists()
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("the writer failed")
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "victim.txt"]


@pytest.mark.parametrize("name", ["--output=evil.nsys-rep", "-o.nsys-rep", "--help.nsys-rep"])
def test_a_report_named_like_an_option_reaches_nsys_as_a_file(name: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from analyzers.io import nsys_rep

    calls = tmp_path / "calls.txt"
    script = tmp_path / "bin" / "nsys"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\nfor a in "$@"; do echo "$a" >> {calls}; done\nexit 1\n')
    script.chmod(0o755)
    monkeypatch.setenv("NSYS", str(script))
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_bytes(b"not really a report")
    with pytest.raises(Exception, match="nsys export failed"):
        nsys_rep.nsys_rep_to_sqlite(name)
    args = calls.read_text().splitlines()
    assert name not in args and args[-1] == str(tmp_path / name)  # the report: an absolute path, last
    assert not any(a.startswith(name) for a in args)
    shown = nsys_rep.export_command(Path(name))
    assert f" {name}" not in shown and str(tmp_path / name) in shown  # the command a user would copy


# --------------------------------------------------------------------------- one line and the right exit code


def _no_gpu_rank(root: Path) -> Path:
    import gzip

    src = ROOT / "sample_traces" / "ag-gemm" / "baseline"
    root.mkdir()
    for r in (0, 1):
        doc = json.loads(gzip.decompress((src / f"rank{r}.json.gz").read_bytes()))
        if r == 1:
            doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in ("kernel", "gpu_memcpy",
                                                                                        "gpu_memset")]
        (root / f"rank{r}.json").write_text(json.dumps(doc))
    return root


def test_a_rank_without_gpu_work_is_analyzed_not_a_traceback(tmp_path: Path) -> None:
    folder = _no_gpu_rank(tmp_path / "run")
    for args in (["analyze", str(folder), "--no-cache"], ["analyze", str(folder)], ["analyze", str(folder), "-f", "md"],
                 ["export", str(folder), "--perfetto", str(tmp_path / "p.json")]):
        done = _cli(*args)
        assert done.returncode == 0 and b"Traceback" not in done.stderr, (args, done.stderr[-1500:])
    doc = json.loads(_cli("analyze", str(folder), "-f", "json").stdout)
    assert [m["n_gpu"] for m in doc["ranks"]] == [doc["ranks"][0]["n_gpu"], 0] and doc["ranks"][0]["n_gpu"] > 0


def test_a_closed_stdout_is_one_line_and_a_gone_reader_a_quiet_141() -> None:
    sample = str(ROOT / "sample_traces" / "ag-gemm" / "baseline")
    for fmt in ("table", "json", "md", "csv"):
        closed = subprocess.run([sys.executable, "-m", "overlapscope", "analyze", sample, "-f", fmt], cwd=ROOT,
                                capture_output=False, stderr=subprocess.PIPE, timeout=300,
                                preexec_fn=lambda: os.close(1))
        err = closed.stderr.decode().strip().splitlines()
        assert closed.returncode == 2 and len(err) == 1 and "standard output" in err[0], (fmt, err)
        proc = subprocess.Popen([sys.executable, "-m", "overlapscope", "analyze", sample, "-f", fmt], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdout.close()  # `| head -0`: the reader is gone before the first write
        err_text = proc.stderr.read().decode()
        assert proc.wait(timeout=300) == 141 and err_text == "", (fmt, err_text)


def test_commands_without_output_run_with_stdout_closed(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "overlapscope", "export", str(ROOT / "sample_traces" / "ag-gemm" /
                                                                              "baseline"), "--perfetto",
                           str(tmp_path / "p.json")], cwd=ROOT, stderr=subprocess.PIPE, timeout=300,
                          preexec_fn=lambda: os.close(1))
    assert done.returncode == 0 and (tmp_path / "p.json").stat().st_size > 0


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_run_out_onto_a_file_is_one_line_exit_2(command: str, tmp_path: Path) -> None:
    afile = tmp_path / "taken"
    afile.write_text("mine")
    for out in (afile, afile / "sub"):
        done = _cli(command, "ag-gemm", "--out", str(out))
        err = done.stderr.decode().strip().splitlines()
        assert done.returncode == 2 and len(err) == 1 and "not a folder" in err[0], err
    assert afile.read_text() == "mine"


def test_the_progress_bar_shows_file_names_as_text(tmp_path: Path) -> None:
    """The loading bar's description is rich markup: a file named "[link=...]" made a terminal hyperlink."""
    import shutil

    for r in (0, 1):
        shutil.copy(ROOT / "sample_traces" / "ag-gemm" / "baseline" / f"rank{r}.json.gz",
                    tmp_path / f"rank{r} [link=https:evil.example][bold]x.json.gz")
    done = _cli("analyze", str(tmp_path), "--no-cache", "-f", "json", env={"FORCE_COLOR": "1"})
    err = RICH_CURSOR.sub("", SGR.sub("", done.stderr.decode()))
    assert done.returncode == 0 and "loading" in err and not CONTROL.search(err), err[-500:]
    assert "[link=https:evil.example]" in err  # the name, as typed


def test_json_to_a_terminal_escapes_what_the_terminal_would_run(run_dir: Path) -> None:
    """JSON keeps names exactly; to a terminal (FORCE_COLOR stands for one here) the C1 controls and bidi
    characters JSON encoders leave raw are written as \\u escapes: the same data, nothing for the terminal."""
    piped = _cli("analyze", str(run_dir), "-f", "json")
    shown = _cli("analyze", str(run_dir), "-f", "json", env={"FORCE_COLOR": "1"})
    assert piped.returncode == shown.returncode == 0
    assert CONTROL.search(piped.stdout.decode())  # the name's C1 CSI and bidi override, raw in the file
    assert not CONTROL.search(shown.stdout.decode()) and json.loads(shown.stdout) == json.loads(piped.stdout)


def test_the_nsys_unpack_never_follows_a_planted_link(tmp_path: Path, private_cache: Path) -> None:
    import gzip

    from analyzers.io.nsys_cache import entry_paths
    from analyzers.io.nsys_gz import gunzip_to_cache

    from .bad_inputs import NSYS_SMALL

    packed = tmp_path / "r.sqlite.gz"
    packed.write_bytes(gzip.compress(NSYS_SMALL.read_bytes()))
    out, _ = entry_paths(packed, "gunzip")
    out.parent.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out.with_name(f"{out.stem}.part-{os.getpid()}.sqlite").symlink_to(victim)  # the name the old code used
    got = gunzip_to_cache(packed)
    assert victim.read_text() == "keep me" and got.read_bytes() == NSYS_SMALL.read_bytes()
