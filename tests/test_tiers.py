"""The fast tier's list of slow tests names tests that exist, and leaves every other module some fast tests."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from .tiers import EVERY_TEST, SLOW, mark_slow

TESTS = Path(__file__).resolve().parent


def test_every_slow_name_is_a_test_of_its_module():
    for module, names in SLOW.items():
        assert (TESTS / f"{module}.py").is_file(), f"tests/tiers.py names {module}, which is not a test module"
        if names == (EVERY_TEST,):
            continue
        loaded = importlib.import_module(f"tests.{module}")
        missing = [n for n in names if not callable(getattr(loaded, n, None)) or not n.startswith("test_")]
        assert not missing, f"tests/tiers.py: {module} has no test {missing}"


def test_only_modules_marked_whole_are_left_out_of_the_fast_tier():
    """A module whose every test is slow is named whole (EVERY_TEST), so the list says so, not by accident."""
    for module, names in SLOW.items():
        if names == (EVERY_TEST,):
            continue
        loaded = importlib.import_module(f"tests.{module}")
        tests = {n for n in dir(loaded) if n.startswith("test_") and callable(getattr(loaded, n))}
        assert tests - set(names), f"every test of {module} is listed slow: mark it {EVERY_TEST!r} instead"


class _Item:
    """What mark_slow reads of a collected test: its module, its name and the markers added."""

    def __init__(self, module: str, name: str, originalname: str) -> None:
        self.module = SimpleNamespace(__name__=f"tests.{module}")
        self.name, self.originalname, self.markers = name, originalname, []

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.markers.append(marker.name)


def test_mark_slow_marks_the_named_tests_only(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(SLOW, "test_demo", ("test_slow_one",))
    monkeypatch.setitem(SLOW, "test_all_slow", (EVERY_TEST,))
    items = [_Item("test_demo", "test_slow_one[1]", "test_slow_one"), _Item("test_demo", "test_fast", "test_fast"),
             _Item("test_all_slow", "test_any", "test_any"), _Item("test_other", "test_slow_one", "test_slow_one")]
    mark_slow(items)  # type: ignore[arg-type]
    assert [i.markers for i in items] == [["slow"], [], ["slow"], []]
