"""Regexes run against names read from trace files, with a time bound.

A user's pattern (--rules, --step-pattern, --fix drop=...) meets names a hostile file chose: Python's
`re` backtracks, and a pattern with nested quantifiers ("(a+)+$") on a 37-character name runs for
longer than anyone waits. Two ways out were weighed: an engine without backtracking (google-re2, the
`regex` package's timeout) would be a new compiled dependency, and RE2 refuses lookarounds and
backreferences that rule files use; `re`'s matcher, however, checks for signals while it runs. So
every batch of matches of one pattern runs under a SIGALRM timer (REGEX_SECONDS, $OVERLAPSCOPE_REGEX_SECONDS
to change it) and a pattern that passes it stops with an OptionValueError (one line, exit 2) naming the
option, the pattern and the name it was matching. Patterns run once per distinct name (names are
interned), so a legitimate pattern spends microseconds per name, far inside the bound.

The timer needs the main thread of a POSIX process: there (the CLI, its pool workers) `re` runs under it.
In another thread (a Dask worker's, the app's script thread) no timer can be set, so there the same pattern
runs on the `regex` package, whose matcher takes a timeout itself (and accepts `re`'s syntax): the bound is
the same everywhere, the error the same one line.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from analyzers.errors import OptionValueError

ENV_REGEX_SECONDS = "OVERLAPSCOPE_REGEX_SECONDS"
REGEX_SECONDS = 2.0  # one pattern over every distinct name of one trace


class _Timeout(BaseException):
    """Raised by the timer's signal handler (a BaseException: no `except Exception` in a caller swallows it)."""


def regex_seconds() -> float:
    try:
        value = float(os.environ.get(ENV_REGEX_SECONDS, REGEX_SECONDS))
    except ValueError:
        return REGEX_SECONDS
    return value if value > 0 else REGEX_SECONDS


def can_bound() -> bool:
    """A timer can interrupt matching here: the main thread of a process with SIGALRM."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextmanager
def _time_bound(seconds: float) -> Iterator[None]:
    if not can_bound():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, expire)
    outer = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer[0] > 0:  # someone else's timer was running: give back what was left of it
            signal.setitimer(signal.ITIMER_REAL, *outer)


class _TimedPattern:
    """A `regex` pattern whose search / match / fullmatch share one deadline (the bound of a whole batch),
    for threads where no SIGALRM timer can be set."""

    def __init__(self, rx: Any, deadline: float) -> None:
        self.rx, self.deadline = rx, deadline

    def _left(self) -> float:
        return max(self.deadline - time.monotonic(), 1e-3)

    def search(self, text: str) -> Any:
        return self.rx.search(text, timeout=self._left())

    def match(self, text: str) -> Any:
        return self.rx.match(text, timeout=self._left())

    def fullmatch(self, text: str) -> Any:
        return self.rx.fullmatch(text, timeout=self._left())


def _thread_pattern(pattern: str, seconds: float) -> Any:
    """The pattern on the `regex` engine with a deadline, or None where that engine reads it otherwise."""
    import regex

    try:
        return _TimedPattern(regex.compile(pattern), time.monotonic() + seconds)
    except regex.error:
        return None


def each(pattern: str, what: str, values: Iterable[str], fn: Callable[[Any, str], Any]) -> list[Any]:
    """[fn(compiled pattern, value) for each value], all of it within the time bound; an OptionValueError
    naming `what` (the option: "--step-pattern", "--fix drop=") when it runs past it."""
    rx: Any = re.compile(pattern)
    seconds = regex_seconds()
    if not can_bound():
        rx = _thread_pattern(pattern, seconds) or rx
    out: list[Any] = []
    current = ""
    try:
        with _time_bound(seconds):
            for current in values:
                out.append(fn(rx, current))
    except (_Timeout, TimeoutError):
        shown = ascii(current[:40]) + ("..." if len(current) > 40 else "")
        raise OptionValueError(
            f"{what} {ascii(pattern)}: matching ran past {seconds:g} s on a name of {len(current)} characters "
            f"({shown}): the pattern backtracks without end (nested quantifiers such as (a+)+); simplify it "
            f"(or set {ENV_REGEX_SECONDS})") from None
    return out


def search_each(pattern: str, names: Iterable[str], what: str) -> np.ndarray:
    """Per name: re.search(pattern, name) found something, within the time bound (see `each`)."""
    return np.asarray(each(pattern, what, names, lambda rx, n: rx.search(n) is not None), dtype=bool)
