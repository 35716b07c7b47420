"""The fast tier's list of slow tests names tests that exist, and leaves every other module some fast tests."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from . import tiers
from .tiers import EVERY_TEST, HEAVIEST_FIRST, SLOW, heaviest_first, mark_slow

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


def test_heaviest_first_names_each_test_module_once():
    assert len(set(HEAVIEST_FIRST)) == len(HEAVIEST_FIRST)
    missing = [m for m in HEAVIEST_FIRST if not (TESTS / f"{m}.py").is_file()]
    assert not missing, f"tests/tiers.py: HEAVIEST_FIRST names {missing}, which are not test modules"


def test_heaviest_first_moves_the_named_modules_ahead_and_keeps_every_other_order(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(tiers, "HEAVIEST_FIRST", ("test_big", "test_mid"))
    items = [_Item(m, n, n) for m, n in [("test_a", "t1"), ("test_mid", "t2"), ("test_big", "t3"), ("test_a", "t4"),
                                         ("test_mid", "t5"), ("test_big", "t6"), ("test_z", "t7")]]
    heaviest_first(items)  # type: ignore[arg-type]
    assert [i.name for i in items] == ["t3", "t6", "t2", "t5", "t1", "t4", "t7"]
