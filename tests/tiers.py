"""Which tests are slow: the fast tier (`python -m pytest -m "not slow"`) leaves them out, the whole suite runs them.

A test is slow when it takes seconds on the 2-core development machine: it starts a Streamlit server or a
browser, runs torchrun, runs the command line once per case, or tries thousands of fuzzed inputs. They are
named here, by module, rather than decorated in each file, so one place says what the fast tier skips;
`@pytest.mark.slow` on a test works too. Every module keeps tests in the fast tier except the ones marked
"*" (each of their tests needs a browser or a run of the runners). Measure with
`python -m pytest -q --durations=30 tests/test_x.py` before adding a name.
"""

from __future__ import annotations

import pytest

EVERY_TEST = "*"

# module name -> the test functions in it that are slow (parametrized cases included), or EVERY_TEST
SLOW: dict[str, tuple[str, ...]] = {}


def mark_slow(items: list[pytest.Item]) -> None:
    """Add the `slow` marker to every collected test SLOW names."""
    for item in items:
        module = getattr(item, "module", None)
        names = SLOW.get(module.__name__.rsplit(".", 1)[-1], ()) if module is not None else ()
        if EVERY_TEST in names or getattr(item, "originalname", item.name) in names:
            item.add_marker(pytest.mark.slow)
