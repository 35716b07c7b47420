"""Shared fixtures: where the bundled real traces live, and the repo root on sys.path."""

from __future__ import annotations

import gzip
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Unchanged copies of public traces from other projects (attribution: tests/data/public/README.md).
PUBLIC = ROOT / "tests" / "data" / "public"
HTA_TRACES = PUBLIC / "hta"
NSYS_PACKED = PUBLIC / "nsys"  # SQLite exports stored gzipped (.sqlite.gz) to keep the repository lean


def _unpack_nsys(packed: Path) -> Path:
    """The nsys exports as plain .sqlite files in a private temp dir (tests open and copy them)."""
    out = Path(tempfile.mkdtemp(prefix="overlapscope-test-nsys-"))
    for src in sorted(packed.iterdir()):
        if src.name.endswith(".sqlite.gz"):
            with gzip.open(src, "rb") as fin, (out / src.name[: -len(".gz")]).open("wb") as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
        elif src.is_file() and src.name != "README.md":
            shutil.copy(src, out / src.name)
    return out


NSYS_TRACES = _unpack_nsys(NSYS_PACKED)
# CLI runs in tests parse through the parse cache: keep it private to the test session.
os.environ.setdefault("OVERLAPSCOPE_CACHE_DIR", tempfile.mkdtemp(prefix="overlapscope-test-cache-"))
SAMPLES = ROOT / "sample_traces"


@pytest.fixture(scope="session")
def hta_dir() -> Path:
    return HTA_TRACES


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(NSYS_TRACES, ignore_errors=True)
