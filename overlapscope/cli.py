"""The `overlapscope` command line: registers every command on the shared app; main() runs it.

The one place commands are registered (in `--help` order). Command modules never import this
module; they take the app's shared options and helpers from common.py.
"""

from __future__ import annotations

import atexit
import errno
import io
import os
import sys
import threading
from typing import NoReturn

from typer._click.exceptions import ClickException, NoArgsIsHelpError  # typer's own click
from typer.exceptions import Abort

from analyzers.errors import BadInputError, OptionValueError, UnknownStepsError

from . import cmd_analyze, cmd_app, cmd_cache, cmd_diff, cmd_export, cmd_run, cmd_whatif
from .common import EXIT_BAD_INPUT, EXIT_OK, EXIT_USAGE, UsageFailure, app, err_console


@app.callback()
def _root() -> None:
    """Is your GPU communication really hidden behind computation?"""


app.command("analyze")(cmd_analyze.analyze_cmd)
app.command("app")(cmd_app.app_cmd)
app.command("diff")(cmd_diff.diff_cmd)
app.command("whatif")(cmd_whatif.whatif_cmd)
app.command("run")(cmd_run.run_cmd)
app.command("sweep")(cmd_run.sweep_cmd)
app.command("algorithms")(cmd_run.algorithms_cmd)
app.command("export")(cmd_export.export_cmd)
app.add_typer(cmd_cache.cache_app)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app, turning bad input into one line and exit code 3.

    Typer handles usage errors itself (exit 2, with help); our own errors surface here. A closed standard
    output is an output that cannot be written (one line, exit 2); a reader that went away (`| head`) ends
    the command quietly with EXIT_PIPE.
    """
    _guard_closed_streams()
    code = EXIT_OK
    try:
        done = app(args=argv, prog_name="overlapscope", standalone_mode=False)
        code = done if isinstance(done, int) else EXIT_OK  # an Exit's code (the commands return None)
    except SystemExit as exc:
        if isinstance(cause := exc.__context__, OSError) and cause.errno == errno.EPIPE:
            return _output_failed(cause)  # typer ends a broken pipe with exit 1, the code of a failed gate
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except NoArgsIsHelpError as exc:
        exc.show()  # the help, as asked for by giving nothing
        return EXIT_USAGE
    except ClickException as exc:  # typer's usage errors, one line like ours
        err_console.print(f"overlapscope: usage error: {_one_line(exc.format_message())}", markup=False,
                          highlight=False)
        return exc.exit_code
    except Abort:
        return 1
    except BadInputError as exc:
        err_console.print(f"overlapscope: error: {exc}", markup=False, highlight=False)
        return EXIT_BAD_INPUT
    except (UsageFailure, UnknownStepsError, OptionValueError) as exc:
        err_console.print(f"overlapscope: usage error: {exc}", markup=False, highlight=False)
        return EXIT_USAGE
    except OSError as exc:
        if exc.errno not in OUTPUT_ERRNOS:
            raise
        return _output_failed(exc)
    try:  # what is still buffered: a full disk shows here, and must not pass as success
        sys.stdout.flush()
    except OSError as exc:
        if exc.errno not in OUTPUT_ERRNOS:
            raise
        return _output_failed(exc)
    return code


class _ClosedOutput(io.TextIOBase):
    """Standard output started closed (`>&-`): every write fails as writing to a closed descriptor does, so
    a command with something to print says so in one line, and one that prints nothing runs as usual."""

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")

    def isatty(self) -> bool:
        return False


def _guard_closed_streams() -> None:
    """Python sets sys.stdout / sys.stderr to None for a descriptor closed at start: output to a closed
    stdout fails in one line (_ClosedOutput), messages to a closed stderr are dropped."""
    if sys.stdout is None:
        sys.stdout = _ClosedOutput()
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the process's stderr for the rest of its life


def _one_line(text: str) -> str:
    return " ".join(text.split())


# A write that failed for want of room, a working device or an open descriptor, or whose reader went away
# (the inputs' read errors are BadInputErrors).
OUTPUT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS, errno.EBADF, errno.EPIPE)
EXIT_PIPE = 128 + 13  # the reader of standard output went away (`| head`): what a process ended by SIGPIPE reports


def _output_failed(exc: OSError) -> int:
    """Standard output could not be written (a full disk, /dev/full, a closed descriptor): one line, exit 2;
    its reader went away (EPIPE): quietly, EXIT_PIPE. What is left in the buffer is dropped so that the exit
    does not try again."""
    try:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - replaces the broken stream for the rest of the exit
    except OSError:
        pass
    if exc.errno == errno.EPIPE:
        return EXIT_PIPE
    err_console.print(f"overlapscope: error: standard output: cannot write ({exc.strerror or exc})", markup=False,
                      highlight=False)
    return EXIT_USAGE


def exit_after_command(code: int) -> NoReturn:
    """Exit with code, skipping the interpreter's teardown where that is safe.

    Tearing down frees every table and module (pandas, pyarrow) object by object: 0.1-0.2 s of
    every command, a tenth of an 8-rank analysis (benchmarks/RESULTS.md), while the OS takes the
    memory back at once. Both output streams are flushed and the atexit handlers run first
    (process pools, logging, temporary folders close as usual); with any other thread still
    running, the normal exit waits for it instead.
    """
    if threading.active_count() > 1:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: what a normal exit would also lose
            pass
    atexit._run_exitfuncs()
    os._exit(code)
