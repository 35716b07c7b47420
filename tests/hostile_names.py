"""Names that try to inject into what overlapscope prints, and traces that carry them (built from a bundled
run, nothing committed): terminal control sequences, rich markup, Markdown and HTML, spreadsheet formulas."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from .conftest import ROOT

ESC_CLEAR_AND_TITLE = "\x1b[2J\x1b[H\x1b]0;pwned\x07"  # clear the screen, home the cursor, retitle the window
C1_CSI = "\x9b31m"  # the one-byte CSI (C1) form
BIDI = "\u202egnp.exe"  # right-to-left override
MARKUP = "[/dim][bold red]"  # a closing tag with nothing open raised rich's MarkupError
FORGED_ROWS = "a|b\n| forged | row |\n"
RAW_HTML = "<img src=x onerror=alert(1)>"
IMAGE = "![i](http://evil.example/pixel.png)"
LINK = "[click](https://evil.example/) https://evil.example/bare www.evil.example me@evil.example"
FORMULA = '=HYPERLINK("http://evil.example","x")'

# One kernel name holding every class at once, and names that are only a formula (CSV's first character).
HOSTILE_KERNEL = (f"nvjet_{ESC_CLEAR_AND_TITLE}{C1_CSI}{MARKUP}{FORGED_ROWS}{RAW_HTML}{IMAGE} {LINK} :red[x] "
                  f"$x$ {BIDI}")
FORMULA_NAMES = (FORMULA, "@SUM(1+1)", "+1+cmd|' /C calc'!A0", "-2+3", "\t=1+1", "\r=1+1", " =1+1")
HOSTILE_FOLDER = "run [/dim] |x| <b> =1+1 \x1b[31m"

CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")

FSDP_ZERO3 = ROOT / "sample_traces" / "fsdp" / "zero3"


def hostile_run(root: Path, kernel_name: str = HOSTILE_KERNEL, folder: str = HOSTILE_FOLDER,
                source: Path = FSDP_ZERO3) -> Path:
    """A copy of a bundled 2-rank run whose GEMM kernels (nvjet_*, named in its findings) carry kernel_name,
    in a folder named folder; returns the folder."""
    out = root / folder
    out.mkdir(parents=True)
    for path in sorted(source.glob("rank?.json.gz")):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel" and str(e.get("name", "")).startswith("nvjet"):
                e["name"] = kernel_name
        (out / path.name.removesuffix(".gz")).write_text(json.dumps(doc))
    return out
