"""Property-based fuzzing (hypothesis) of the command line's options on a small valid trace set.

Random option values and ranges (steps, step patterns, comm kernel names, gate thresholds, ranks, jobs,
scheduler addresses, formats) are given to `analyze`, `diff` and `export`; whatever they are, the
command ends with exit 0, 1, 2 or 3, an error is exactly one line on stderr (no traceback), each example
takes bounded time (hypothesis' deadline) and the process's peak memory stays bounded.

Examples: FUZZ_OPTION_EXAMPLES (default 30), derandomized, so CI runs the same ones each time.
"""

from __future__ import annotations

import os
import resource
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from overlapscope.cli import main
from overlapscope.common import UsageFailure, check_scheduler

from .conftest import ROOT

RUN = ROOT / "sample_traces" / "ag-gemm" / "baseline"
EXAMPLES = int(os.environ.get("FUZZ_OPTION_EXAMPLES", "30"))
FUZZ = settings(max_examples=EXAMPLES, deadline=120_000, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

HUGE = st.integers(min_value=-(2**70), max_value=2**70)
SMALL = st.integers(min_value=-3, max_value=6)
number = st.one_of(SMALL, HUGE).map(str)
steps = st.one_of(
    number,
    st.tuples(st.one_of(SMALL, HUGE), st.one_of(SMALL, HUGE)).map(lambda t: f"{t[0]}-{t[1]}"),
    st.lists(st.one_of(SMALL.map(str), st.tuples(SMALL, HUGE).map(lambda t: f"{t[0]}-{t[1]}")),
             min_size=1, max_size=4).map(",".join),
    st.text(alphabet="0123456789-, x²", max_size=12),
)
patterns = st.one_of(
    st.sampled_from([r"^ProfilerStep\s*#\s*(\d+)$", r"ProfilerStep#(\d+)", r"(\d+)", r".*", r"^$", r"(a)(b)",
                     r"ProfilerStep#(²)"]),
    st.text(alphabet="()[]{}*+?.^$|\\d#Pa1", max_size=10),
)
thresholds = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), number,
                       st.sampled_from(["nan", "-inf", "80", "0.5", "1e308", "abc", ""]))
kernels = st.text(alphabet=" ncl_AGEMMxy", max_size=6)


def _bad_scheduler(text: str) -> bool:
    """Only addresses that do not parse: a well-formed one would wait for a cluster that is not there."""
    try:
        check_scheduler(text)
    except UsageFailure:
        return True
    return not text


options = st.fixed_dictionaries({}, optional={
    "--steps": steps,
    "--step-pattern": patterns,
    "--comm-kernel": kernels,
    "--fail-under-overlap": thresholds,
    "--rank": number,
    "--jobs": st.one_of(st.integers(min_value=-2, max_value=3).map(str), number),
    "--scheduler": st.text(alphabet="tcp:/[]@a1.", max_size=14),
    "--format": st.sampled_from(["table", "json", "md", "csv", "xml"]),
    "--like-hta": st.just(None),
    "--no-cache": st.just(None),
})


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("fuzz-options")
    run = root / "run"
    shutil.copytree(RUN, run)
    return run, run / "rank0.json.gz"


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OVERLAPSCOPE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "fuzz-options-cache"))
    monkeypatch.delenv("OVERLAPSCOPE_SCHEDULER", raising=False)


def _argv(opts: dict[str, str | None], allowed: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for name, value in opts.items():
        if name not in allowed:
            continue
        out += [name] if value is None else [name, value]
    return out


def _check(code: int, err: str, out: str) -> None:
    assert code in (0, 1, 2, 3), (code, err)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    if code in (2, 3):
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("overlapscope: "), err
    else:
        assert out, err


@FUZZ
@given(opts=options, single=st.booleans())
def test_analyze_options(opts: dict[str, str | None], single: bool, traces: tuple[Path, Path],
                         capsys: pytest.CaptureFixture[str]) -> None:
    assume("--scheduler" not in opts or _bad_scheduler(opts["--scheduler"] or ""))
    run, one = traces
    code = main(["analyze", str(one if single else run), *_argv(opts, tuple(options_names))])
    captured = capsys.readouterr()
    _check(code, captured.err, captured.out)


options_names = ("--steps", "--step-pattern", "--comm-kernel", "--fail-under-overlap", "--rank", "--jobs",
                 "--scheduler", "--format", "--like-hta", "--no-cache")
DIFF_OPTIONS = ("--steps", "--step-pattern", "--comm-kernel", "--jobs", "--scheduler", "--like-hta", "--no-cache")


@FUZZ
@given(opts=options, top=st.one_of(SMALL, HUGE).map(str))
def test_diff_options(opts: dict[str, str | None], top: str, traces: tuple[Path, Path],
                      capsys: pytest.CaptureFixture[str]) -> None:
    assume("--scheduler" not in opts or _bad_scheduler(opts["--scheduler"] or ""))
    run, _ = traces
    code = main(["diff", str(run), str(run), "--top", top, *_argv(opts, DIFF_OPTIONS)])
    captured = capsys.readouterr()
    _check(code, captured.err, captured.out)


@FUZZ
@given(opts=options, name=st.sampled_from(["out.json", "out.json.gz", "out.txt", "rank0.json.gz", "", "sub/x.json"]),
       overwrite=st.booleans())
def test_export_options(opts: dict[str, str | None], name: str, overwrite: bool, traces: tuple[Path, Path],
                        tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]) -> None:
    """Outputs too: a name that is an input, a missing folder, a wrong suffix; the inputs never change."""
    assume("--scheduler" not in opts or _bad_scheduler(opts["--scheduler"] or ""))
    run, one = traces
    before = one.read_bytes()
    target = (run / name) if name == "rank0.json.gz" else tmp_path_factory.mktemp("export") / name
    args = ["export", str(one), "--perfetto", str(target), *(["--overwrite"] if overwrite else []),
            *_argv(opts, ("--steps", "--step-pattern", "--comm-kernel", "--rank"))]
    code = main(args)
    captured = capsys.readouterr()
    assert code in (0, 2, 3), (code, captured.err)
    assert "Traceback" not in captured.err
    if code:
        assert len(captured.err.strip().splitlines()) == 1, captured.err
    assert one.read_bytes() == before


def test_memory_stayed_bounded() -> None:
    """After every example above (same process): peak RSS far below what an enumerated range or an
    unbounded read would take."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert peak < 3 << 30, f"peak RSS {peak >> 20} MiB"
