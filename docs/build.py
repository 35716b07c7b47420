"""Writes the documentation's generated parts, so they say what the software does now.

- docs/cli.md, from each command's own --help (docs/cli_reference.py);
- every example-output block in README.md and docs/*.md: the text between `<!-- begin: NAME -->` and
  `<!-- end: NAME -->` is the output of EXAMPLES[NAME], run on the bundled samples.

    python -m docs.build           rewrite them
    python -m docs.build --check   rewrite nothing; exit 1 naming every stale block (tests/test_docs.py)

Output is deterministic: relative paths, the piped (200-column, uncoloured) table width, a private
cache folder; the commands print no timings or dates on stdout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from docs.cli_reference import cli_markdown

ROOT = Path(__file__).resolve().parents[1]
CLI_PAGE = ROOT / "docs" / "cli.md"
BLOCK = re.compile(r"(<!-- begin: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end: (?P=name) -->)", re.S)
TABLE_TOP = ("┏", "┌")


@dataclass(frozen=True)
class Example:
    """A command whose output a page shows. `keep`: the output sections shown (by the title line above each
    table; the lines before the first title always stay); the others are named on one elided line."""

    argv: tuple[str, ...]
    keep: tuple[str, ...] | None = None
    name_left_out: bool = True  # the elided line names the sections left out (else it is "...")


HOST_SYNC = "sample_traces/ag-gemm/host-sync"
HTA = "tests/data/public/hta"


def findings_of(path: str) -> Example:
    return Example(("analyze", path), keep=("findings",), name_left_out=False)


def syncs_of(path: str) -> Example:
    return Example(("analyze", path), keep=("blocking host syncs",), name_left_out=False)


EXAMPLES: dict[str, Example] = {
    "analyze-host-sync": Example(("analyze", HOST_SYNC), keep=("overlap —", "findings")),
    "analyze-host-sync-full": Example(("analyze", HOST_SYNC)),
    "analyze-baseline-collectives": Example(("analyze", "sample_traces/ag-gemm/baseline"),
                                            keep=("Collectives: size",)),
    "analyze-hta-public": Example(("analyze", "tests/data/public/hta/trace_filter_sampled_rank-*.json.gz"),
                                  keep=("overlap —",)),
    "whatif-host-sync": Example(("whatif", HOST_SYNC, "--fix", "host-syncs")),
    "diff-host-sync": Example(("diff", HOST_SYNC, "sample_traces/ag-gemm/sync-before-loop"),
                              keep=("per rank",)),
    "diff-host-sync-top8": Example(("diff", HOST_SYNC, "sample_traces/ag-gemm/sync-before-loop", "--top", "8")),
    "diff-hta-pair": Example(("diff", f"{HTA}/trace_diff_control.json.gz", f"{HTA}/trace_diff_test.json.gz",
                              "--labels", "control,test", "--top", "6")),
    "findings-host-sync": findings_of(HOST_SYNC),
    "findings-sync-in-loop": findings_of("sample_traces/ag-gemm/sync-in-loop"),
    "findings-front-loaded": findings_of("sample_traces/fsdp/front-loaded"),
    "findings-zero3-prefetch": findings_of("benchmarks/recordings/fsdp-dim2048/fsdp/zero3-prefetch"),
    "findings-sync-before-loop": findings_of("sample_traces/ag-gemm/sync-before-loop"),
    "findings-tuned-no-gate": findings_of("sample_traces/ag-gemm-race/tuned-no-gate"),
    "findings-two-stream": findings_of("sample_traces/symm-mem/two-stream"),
    "syncs-cloverleaf": syncs_of("tests/data/public/nsys/pipit_perlmutter-cloverleaf-cuda.sqlite.gz"),
    "syncs-negative-queue": syncs_of(f"{HTA}/negative_queue_rank0.json.gz"),
}


def sections(lines: list[str]) -> list[tuple[str, list[str]]]:
    """The output cut at each table's title line: [(title, lines)], the first title '' (the lines before)."""
    out: list[tuple[str, list[str]]] = [("", [])]
    for i, line in enumerate(lines):
        is_title = i + 1 < len(lines) and lines[i + 1].startswith(TABLE_TOP) and not line.startswith(TABLE_TOP)
        if is_title:
            out.append((line, []))
        out[-1][1].append(line)
    return out


def trim(text: str, keep: tuple[str, ...] | None, name_left_out: bool = True) -> str:
    """The sections of `text` whose titles start with one of `keep`; each run of others becomes one line."""
    if keep is None:
        return text
    kept: list[str] = []
    left_out: list[str] = []

    def elide() -> None:
        if left_out:
            kept.append(f"... ({', '.join(left_out)}) ..." if name_left_out else "...")
            left_out.clear()

    for title, lines in sections(text.splitlines()):
        if not title and not lines:
            continue
        if not title or title.startswith(keep):
            elide()
            kept += lines
        else:
            left_out.append(title.split(" (")[0].rstrip(":"))
    elide()
    return "\n".join(kept) + "\n"


def _environment(cache_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TTY_COMPATIBLE", "FORCE_COLOR", "COLUMNS")}
    env.update(OVERLAPSCOPE_CACHE_DIR=cache_dir, PYTHONPATH=str(ROOT), NO_COLOR="1")
    return env


def run_command(argv: tuple[str, ...], cache_dir: str) -> str:
    """What `overlapscope ARGV` prints on stdout, run from the repository root."""
    done = subprocess.run([sys.executable, "-m", "overlapscope", *argv], cwd=ROOT, capture_output=True, text=True,
                          env=_environment(cache_dir), timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"overlapscope {' '.join(argv)}: exit {done.returncode}: {done.stderr}")
    return done.stdout


def example_block(example: Example, stdout: str) -> str:
    """The block: the command line, then what it printed (trimmed)."""
    shown = " ".join(f"'{a}'" if "*" in a else a for a in example.argv)
    return f"```\n$ overlapscope {shown}\n{trim(stdout, example.keep, example.name_left_out)}```\n"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks_in(text: str) -> list[str]:
    return [m.group("name") for m in BLOCK.finditer(text)]


def render_examples(names: set[str]) -> dict[str, str]:
    """{name: block} for the named examples, each distinct command run once."""
    unknown = sorted(names - EXAMPLES.keys())
    if unknown:
        raise KeyError(f"blocks with no entry in docs/build.py EXAMPLES: {', '.join(unknown)}")
    commands = sorted({EXAMPLES[n].argv for n in names})
    with tempfile.TemporaryDirectory(prefix="overlapscope-docs-") as cache, \
            ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        printed = dict(zip(commands, pool.map(lambda argv: run_command(argv, cache), commands), strict=True))
    return {n: example_block(EXAMPLES[n], printed[EXAMPLES[n].argv]) for n in names}


def rewritten(text: str, outputs: dict[str, str]) -> str:
    return BLOCK.sub(lambda m: m.group(1) + outputs[m.group("name")] + m.group(4), text)


def generated() -> dict[Path, str]:
    """Every generated page as it should read now: {path: text}."""
    texts = {p: p.read_text() for p in pages() if p != CLI_PAGE}
    outputs = render_examples({n for t in texts.values() for n in blocks_in(t)})
    out = {p: rewritten(t, outputs) for p, t in texts.items() if blocks_in(t)}
    out[CLI_PAGE] = cli_markdown()
    return out


def stale(want: dict[Path, str]) -> list[str]:
    """'path: block NAME' for every generated part that differs from the file on disk."""
    found = []
    for path, text in want.items():
        have = path.read_text() if path.exists() else ""
        if path == CLI_PAGE:
            found += [f"{path.relative_to(ROOT)}: the whole page"] if have != text else []
            continue
        now = {m.group("name"): m.group("body") for m in BLOCK.finditer(have)}
        new = {m.group("name"): m.group("body") for m in BLOCK.finditer(text)}
        found += [f"{path.relative_to(ROOT)}: block {n}" for n in new if now.get(n) != new[n]]
    return found


def main(argv: list[str]) -> int:
    want = generated()
    if "--check" in argv:
        problems = stale(want)
        for line in problems:
            print(f"stale: {line} (python -m docs.build rewrites it)", file=sys.stderr)
        return 1 if problems else 0
    for path, text in want.items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
