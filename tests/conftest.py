"""Shared fixtures: where the shared real traces live, and the repo root on sys.path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SHARED = ROOT.parent / "shared"
HTA_TRACES = SHARED / "traces" / "public" / "hta"
NSYS_TRACES = SHARED / "traces" / "public" / "nsys"
SAMPLES = ROOT / "sample_traces"


@pytest.fixture(scope="session")
def hta_dir() -> Path:
    if not HTA_TRACES.is_dir():
        pytest.fail(f"shared traces missing at {HTA_TRACES}: CI must run with ../shared beside the checkout")
    return HTA_TRACES
