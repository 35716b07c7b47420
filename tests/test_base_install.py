"""The base install (`pip install -e .`, no extras) has no Plotly, Streamlit or kaleido: every command that
draws nothing must work without them, and a command that draws must name the extra in one line (exit 2).

Each command runs in a subprocess whose interpreter refuses to import those libraries: a sitecustomize on
PYTHONPATH puts an import finder first on sys.meta_path that raises ModuleNotFoundError for them (the
pool's worker processes inherit it). So a module-level `import plotly` reached from a non-drawing command
fails here, in the suite, as it would on a new user's base install (.ci/base_install_check.sh checks that
install itself in CI).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import subprocess
import sys

import pytest

from .conftest import ROOT, SAMPLES

DRAWING_LIBRARIES = ("plotly", "streamlit", "kaleido")
# The modules that build figures; they alone may need the app extra (checked both ways below).
FIGURE_MODULES = ("viz.figures", "viz.collectives_figure", "viz.critical_figures", "viz.scale_figures",
                  "viz.export_html", "viz.hover", "viz.iterations_figure", "viz.sync_markers")
HOST_SYNC = SAMPLES / "ag-gemm" / "host-sync"
BEFORE_LOOP = SAMPLES / "ag-gemm" / "sync-before-loop"
NSYS_SAMPLE = SAMPLES / "ag-gemm-nsys" / "sync-in-loop"
EXTRA_HINT = "pip install -e '.[app]'"

BLOCKER = f'''
"""Test bootstrap (tests/test_base_install.py): the drawing libraries cannot be imported."""
import sys

BLOCKED = {DRAWING_LIBRARIES!r}


class NoDrawingLibraries:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked: the base install has none)", name=name)
        return None


sys.meta_path.insert(0, NoDrawingLibraries())
'''


@pytest.fixture(scope="module")
def base_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a subprocess without the drawing libraries, with a cache of its own."""
    boot = tmp_path_factory.mktemp("no-drawing-libraries")
    (boot / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(boot), str(ROOT)])
    env["OVERLAPSCOPE_CACHE_DIR"] = str(tmp_path_factory.mktemp("base-cache"))
    env.pop("OVERLAPSCOPE_SCHEDULER", None)
    return env


def python(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def overlapscope(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """One command in a subprocess; it must exit 0 without a traceback."""
    r = python(env, "-m", "overlapscope", *args)
    assert r.returncode == 0 and "Traceback" not in r.stderr, f"overlapscope {' '.join(args)}: exit {r.returncode}\n" \
                                                              f"{r.stderr[-3000:]}"
    return r


def test_the_bootstrap_makes_every_drawing_library_unimportable(base_env):
    code = ("import importlib\n"
            f"for name in {DRAWING_LIBRARIES!r} + ('plotly.graph_objects',):\n"
            "    try:\n"
            "        importlib.import_module(name)\n"
            "    except ModuleNotFoundError as exc:\n"
            "        print('blocked', exc.name)\n")
    r = python(base_env, "-c", code)
    assert r.returncode == 0, r.stderr
    # a submodule fails at its package
    assert r.stdout.split() == ["blocked", "plotly", "blocked", "streamlit", "blocked", "kaleido", "blocked", "plotly"]


def project_modules(*packages: str) -> list[str]:
    names = []
    for pkg in packages:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__main__":
                continue
            if parts[-1] == "__init__":
                parts.pop()
            names.append(".".join(parts))
    return names


def test_every_non_drawing_module_imports_without_the_drawing_libraries(base_env):
    """Every module of the CLI, the analyzers and viz/ except the figure builders imports with the drawing
    libraries missing; each figure builder fails to (so the list stays exact, and the check really bites)."""
    modules = [m for m in project_modules("overlapscope", "analyzers", "viz") if m not in FIGURE_MODULES]
    code = ("import importlib, sys\n"
            "failed = []\n"
            "for name in sys.argv[1:]:\n"
            "    try:\n"
            "        importlib.import_module(name)\n"
            "    except ImportError as exc:\n"
            "        failed.append(f'{name}: {exc}')\n"
            "print('\\n'.join(failed))\n")
    r = python(base_env, "-c", code, *modules)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "", "modules that need a drawing library at import:\n" + r.stdout
    r = python(base_env, "-c", code, *FIGURE_MODULES)
    assert r.returncode == 0, r.stderr
    assert sorted(line.split(":")[0] for line in r.stdout.split("\n") if line) == sorted(FIGURE_MODULES)


def test_readme_first_command_and_every_analyze_format(base_env):
    table = overlapscope(base_env, "analyze", str(HOST_SYNC))  # README's first command, cold cache
    assert "overlap" in table.stdout and "host-blocking-sync" in table.stdout
    doc = json.loads(overlapscope(base_env, "analyze", str(HOST_SYNC), "-f", "json").stdout)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert all(r["overlap_ns"] == 0 and r["comm_ns"] > 0 for r in doc["ranks"])  # the schedule hides nothing
    assert "host-blocking-sync" in {f["id"] for f in doc["findings"]}
    md = overlapscope(base_env, "analyze", str(HOST_SYNC), "-f", "md").stdout
    assert md.lstrip().startswith("#") and "host-blocking-sync" in md
    rows = list(csv.DictReader(io.StringIO(overlapscope(base_env, "analyze", str(HOST_SYNC), "-f", "csv").stdout)))
    assert [r["rank"] for r in rows] == ["0", "1"]


def test_analyze_an_nsys_export_uncached_with_its_tables(base_env, tmp_path):
    r = overlapscope(base_env, "analyze", str(NSYS_SAMPLE), "--no-cache", "--streams", "--tables", str(tmp_path))
    assert "rank" in r.stdout
    assert [p for p in tmp_path.rglob("*") if p.is_file()], "--tables wrote nothing"


@pytest.mark.parametrize("fmt", ["table", "json", "md"])
def test_diff_and_whatif(base_env, tmp_path, fmt):
    d = overlapscope(base_env, "diff", str(HOST_SYNC), str(BEFORE_LOOP), "-f", fmt,
                     *(["--timeline", str(tmp_path / "t.csv")] if fmt == "table" else []))
    w = overlapscope(base_env, "whatif", str(HOST_SYNC), "--fix", "host-syncs", "-f", fmt)
    if fmt == "json":
        assert json.loads(d.stdout) and json.loads(w.stdout)
    else:
        assert "host-sync" in d.stdout and w.stdout.strip()


def test_export_perfetto_and_collectives_csv(base_env, tmp_path):
    out, coll = tmp_path / "trace.json.gz", tmp_path / "coll.csv"
    overlapscope(base_env, "export", str(HOST_SYNC), "--perfetto", str(out), "--collectives-csv", str(coll))
    assert json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
    assert len(coll.read_text().splitlines()) > 1


@pytest.mark.parametrize("args", [("cache", "info"), ("cache", "clear"), ("run", "--help"), ("sweep", "--help"),
                                  ("algorithms",), ("app", "--help"), ("export", "--help")])
def test_commands_that_only_print(base_env, args):
    assert overlapscope(base_env, *args).stdout.strip()


@pytest.mark.parametrize("args, extra_of", [
    (("export", str(HOST_SYNC), "--html", "{out}/r.html"), "--html"),
    (("export", str(HOST_SYNC), "--png", "{out}/t.png"), "--png / --svg"),
    (("export", "--diff", str(HOST_SYNC), str(BEFORE_LOOP), "--svg", "{out}/d.svg"), "--png / --svg"),
    (("diff", str(HOST_SYNC), str(BEFORE_LOOP), "--html", "{out}/d.html"), "--html"),
    (("app", str(HOST_SYNC), "--dry-run"), "the dashboard"),
])
def test_a_drawing_command_names_the_extra_in_one_line(base_env, tmp_path, args, extra_of):
    r = python(base_env, "-m", "overlapscope", *(a.format(out=tmp_path) for a in args))
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and r.stdout == "", r.stderr
    assert r.stderr.startswith(f"overlapscope: usage error: {extra_of} needs the app extra") and EXTRA_HINT in r.stderr
    assert list(tmp_path.iterdir()) == []  # refused before any work: no file written
