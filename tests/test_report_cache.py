"""The report cache answers the same command on unchanged files without analyzing, and never
answers anything else: a changed file, option, rules file or code version is analyzed afresh, and a
damaged entry is removed and rewritten, never trusted."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analyzers.io import report_cache
from analyzers.io.environment import ENV_CACHE_DIR
from overlapscope.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"


@pytest.fixture()
def run_dir(tmp_path, monkeypatch) -> Path:
    """A copy of a 2-rank run with findings and syncs, and a private cache folder."""
    monkeypatch.setenv(ENV_CACHE_DIR, str(tmp_path / "cache"))
    run = tmp_path / "run"
    shutil.copytree(SAMPLES / "ag-gemm" / "host-sync", run)
    return run


@pytest.fixture()
def analyses(monkeypatch) -> list[int]:
    """Counts the analyses that really run (a hit runs none)."""
    import analyzers.report

    calls: list[int] = []
    real = analyzers.report.analyze

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(analyzers.report, "analyze", counting)
    return calls


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(["analyze", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def entries() -> int:
    return report_cache.info().entries


def test_a_hit_prints_what_the_analysis_printed_without_analyzing(run_dir, analyses, capsys):
    rc, fresh, _ = run_cli(capsys, str(run_dir), "-f", "json", "--no-cache")
    assert rc == 0 and len(analyses) == 1 and entries() == 0  # --no-cache neither reads nor writes
    assert run_cli(capsys, str(run_dir), "-f", "json")[:2] == (0, fresh)
    assert len(analyses) == 2 and entries() == 1
    assert run_cli(capsys, str(run_dir), "-f", "json")[:2] == (0, fresh)
    assert len(analyses) == 2  # the hit did not analyze


@pytest.mark.parametrize("fmt", ["table", "md", "csv"])
def test_every_format_is_served_by_the_one_document(run_dir, analyses, capsys, fmt):
    """Only the JSON document is kept (no pickle), and every format is drawn from it: an entry made by
    `-f json` answers the table, Markdown and CSV too, as a fresh analysis prints them."""
    fresh = run_cli(capsys, str(run_dir), "-f", fmt, "--no-cache")[1]
    assert run_cli(capsys, str(run_dir), "-f", "json")[0] == 0
    assert len(analyses) == 2 and entries() == 1
    assert run_cli(capsys, str(run_dir), "-f", fmt)[:2] == (0, fresh)
    assert run_cli(capsys, str(run_dir), "-f", fmt, "--streams")[0] == 0
    assert len(analyses) == 2  # both hits


def test_gates_give_the_same_verdict_on_a_hit(run_dir, analyses, capsys):
    args = (str(run_dir), "-f", "json", "--fail-under-overlap", "0.99", "--fail-on", "host-blocking-sync")
    miss = run_cli(capsys, *args)
    hit = run_cli(capsys, *args)
    assert len(analyses) == 1
    assert miss == hit and miss[0] == 1
    assert "overlap ratio below 99.0%: rank 0 0.0%, rank 1 0.0%" in miss[2]
    assert "finding(s) present: host-blocking-sync" in miss[2]


@pytest.mark.parametrize("change", ["file contents", "steps", "no-align", "comm-kernel", "rules file",
                                    "no-diagnose", "link-gbps", "code"])
def test_anything_that_changes_the_answer_misses(run_dir, analyses, capsys, monkeypatch, tmp_path, change):
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\npattern = "no_such_kernel_a"\ncategory = "comm"\n')
    base = [str(run_dir), "-f", "json", "--rules", str(rules)]
    first = run_cli(capsys, *base)[1]
    extra: list[str] = []
    if change == "file contents":
        shutil.copy(SAMPLES / "ag-gemm" / "tuned" / "rank0.json.gz", run_dir / "rank0.json.gz")
    elif change == "steps":
        extra = ["--steps", "3"]
    elif change == "no-align":
        extra = ["--no-align"]
    elif change == "comm-kernel":
        extra = ["--comm-kernel", "no_such_kernel_b"]
    elif change == "rules file":
        rules.write_text('[[rule]]\npattern = "no_such_kernel_c"\ncategory = "comm"\n')
    elif change == "no-diagnose":
        extra = ["--no-diagnose"]
    elif change == "link-gbps":
        extra = ["--link-gbps", "123"]
    elif change == "code":
        monkeypatch.setattr(report_cache, "code_fingerprint", lambda: "another release")
    rc, out, _ = run_cli(capsys, *base, *extra)
    assert rc == 0 and len(analyses) == 2, "a changed input or option must be analyzed again"
    if change in ("file contents", "link-gbps"):
        assert out != first


@pytest.mark.parametrize("spelling", ["relative", "symlink"])
def test_the_same_files_named_otherwise_print_their_own_names(run_dir, capsys, monkeypatch, spelling):
    """The document names the run and its files as given (label, sources): an entry made for the absolute
    path must not answer the same bytes named relatively or through a link with the absolute names."""
    assert run_cli(capsys, str(run_dir), "-f", "json")[0] == 0  # an entry for the absolute spelling
    monkeypatch.chdir(run_dir.parent)
    other = "run"
    if spelling == "symlink":
        other = "link"
        Path(other).symlink_to(run_dir, target_is_directory=True)
    fresh = run_cli(capsys, other, "-f", "json", "--no-cache")
    assert fresh[0] == 0 and str(run_dir) not in fresh[1]
    assert run_cli(capsys, other, "-f", "json")[:2] == fresh[:2]
    assert run_cli(capsys, str(run_dir), "-f", "json")[1].count(str(run_dir)) >= 2  # its own entry still


@pytest.mark.parametrize("damage", ["doc", "header"])
def test_a_damaged_entry_is_removed_and_rewritten(run_dir, analyses, capsys, damage):
    fresh = run_cli(capsys, str(run_dir), "-f", "json")[1]
    (entry,) = [p for p in report_cache.cache_root().iterdir() if p.is_dir()]
    victim = entry / {"doc": report_cache.DOC, "header": report_cache.HEADER}[damage]
    victim.write_bytes(victim.read_bytes()[:100])
    assert run_cli(capsys, str(run_dir), "-f", "json")[:2] == (0, fresh)
    assert len(analyses) == 2  # the damaged entry was not trusted
    assert run_cli(capsys, str(run_dir), "-f", "json")[:2] == (0, fresh)
    assert len(analyses) == 2  # it was rewritten whole


def test_a_json_hit_does_not_load_the_analysis_stack(run_dir):
    """Nor does `-f json` import rich, hit or not (its import would delay the per-rank workers' start)."""
    env = {**os.environ, ENV_CACHE_DIR: os.environ[ENV_CACHE_DIR]}
    env.pop("FORCE_COLOR", None)
    env.pop("TTY_COMPATIBLE", None)
    code = ("import sys; from overlapscope.cli import main; rc = main(['analyze', sys.argv[1], '-f', 'json']); "
            "print('pandas' in sys.modules, 'rich' in sys.modules, file=sys.stderr); sys.exit(rc)")
    first = subprocess.run([sys.executable, "-c", code, str(run_dir)], capture_output=True, text=True, env=env,
                           cwd=ROOT, timeout=300)
    hit = subprocess.run([sys.executable, "-c", code, str(run_dir)], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=300)
    assert first.returncode == hit.returncode == 0
    assert first.stderr.split() == ["True", "False"] and hit.stderr.split() == ["False", "False"]
    assert hit.stdout == first.stdout


def test_help_does_not_load_the_analysis_stack():
    code = "import sys, overlapscope.cli; print(sorted(m for m in ('pandas', 'pyarrow', 'plotly') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_bad_input_is_never_cached(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(ENV_CACHE_DIR, str(tmp_path / "cache"))
    bad = tmp_path / "rank0.json"
    bad.write_text('{"traceEvents": [')
    for _ in range(2):
        rc, out, err = run_cli(capsys, str(bad), "-f", "json")
        assert rc == 3 and out == "" and str(bad) in err
    assert entries() == 0


def test_library_versions_match_installed_metadata():
    """The key's library versions are read from metadata folder names: the same as importlib says."""
    import importlib.metadata

    from analyzers.io.report_cache import LIBRARIES, library_versions

    versions = library_versions()
    assert set(versions) == set(LIBRARIES)
    for lib in LIBRARIES:
        assert versions[lib] == importlib.metadata.version(lib), lib


@pytest.mark.parametrize("fmt", ["table", "md", "csv"])
def test_a_hit_in_any_format_does_not_load_the_analysis_stack(run_dir, fmt):
    """The table, Markdown and CSV are drawn from the cached document in plain Python: no pandas, numpy."""
    env = {**os.environ, ENV_CACHE_DIR: os.environ[ENV_CACHE_DIR]}
    code = ("import sys; from overlapscope.cli import main; rc = main(['analyze', sys.argv[1], '-f', sys.argv[2]]); "
            "print('pandas' in sys.modules, 'numpy' in sys.modules, file=sys.stderr); sys.exit(rc)")
    runs = [subprocess.run([sys.executable, "-c", code, str(run_dir), f], capture_output=True, text=True, env=env,
                           cwd=ROOT, timeout=300) for f in ("json", fmt)]
    assert [r.returncode for r in runs] == [0, 0]
    assert runs[1].stderr.split() == ["False", "False"]
    assert "rank" in runs[1].stdout
