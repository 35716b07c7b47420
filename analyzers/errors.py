"""Errors that name the input file and the problem in one line (CLI exit code 3)."""

from __future__ import annotations


class BadInputError(Exception):
    """A trace file (or set of files) that cannot be analyzed; message is one line."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self):
        """Picklable with its two arguments (raised in worker processes, re-raised here)."""
        return type(self), (self.path, self.problem)


class WorkerDiedError(BadInputError):
    """A pool worker was killed while it read a file (out of memory, or the file shrank while mapped:
    SIGBUS); names the files being read then (analyzers/io/parallel.py), as one line (exit code 3),
    not a traceback."""

    def __init__(self, path: object, problem: str = "") -> None:
        several = ", " in str(path)
        super().__init__(path, problem or (
            f"a worker process died while reading {'one of these files' if several else 'this file'} (out of "
            "memory, or the file changed while it was read); nothing was analyzed (--jobs 1 uses less memory)"))


class MixedRunsError(BadInputError):
    """Files from different runs (world sizes, run ids, duplicate ranks) given together."""


class UnknownStepsError(ValueError):
    """A step selection names steps that a trace does not hold (a usage error, not bad input)."""


class OptionValueError(ValueError):
    """A value the user gave an option that cannot be used as given (a usage error, CLI exit code 2, one
    line): a what-if factor outside the range int64 nanoseconds hold, a regex that runs past its time bound."""
