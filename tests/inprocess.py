"""The command line run inside the test process: the same main() and exit code as `python -m overlapscope`,
with standard output and error captured into a CompletedProcess, as subprocess.run(..., text=True) returns.

Why: a subprocess per call spends ~1 s starting Python and importing pandas before the command runs, and a
test module that calls the CLI twenty times waits for that twenty times on the 2-core machine. Tests that
check the command's answers (figures, formats, exit codes of main()) use this; what only a real process
shows (the installed entry's exit, no traceback at interpreter exit, closed or full streams, signals,
the environment a process inherits) stays in the subprocess tests (test_cli, test_bad_inputs,
test_hostile_round3_render, test_hostile_inputs, test_base_install).
"""

from __future__ import annotations

import contextlib
import io
import subprocess
from pathlib import Path

from .conftest import ROOT


def _stream() -> io.TextIOWrapper:
    """A text stream with a .buffer, as sys.stdout has (the binary outputs write to it)."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace", write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)
    return buffer.getvalue().decode("utf-8", errors="backslashreplace").replace("\r\n", "\n")


def cli(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`overlapscope ARGS` in this process, run from cwd; an exception main() does not turn into an exit code
    propagates (the test fails with it, as the subprocess would have printed a traceback)."""
    from overlapscope.cli import main

    argv = [str(a) for a in args]
    out, err = _stream(), _stream()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return subprocess.CompletedProcess(["overlapscope", *argv], code, _text(out), _text(err))
