"""The code's shape stays easy to find one's way in: small modules, no import circles, layers one way.

Parses the source with ast (nothing is imported), so a circle hidden in a function-level import
counts too: no module may import, directly or through others, a module that imports it.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("analyzers", "viz", "overlapscope", "app", "runners")
SIZE_CHECKED = ("analyzers", "viz", "overlapscope", "app", "runners")
MAX_LINES = 400
# Modules allowed over MAX_LINES, each with the reason it cannot be split. Keep it empty if you can.
SIZE_ALLOW_LIST: dict[str, str] = {}

# The two front ends stand side by side on analyzers/ and viz/ (what both draw and write): package -> the
# project packages it must not import.
FORBIDDEN_PACKAGE_IMPORTS = {
    "viz": ("overlapscope", "app", "runners"),
    "overlapscope": ("app",),
    "app": ("overlapscope",),
}
# analyzers' sub-packages, lowest first: a module may import its own layer or lower ones, never a higher one.
LAYERS = ("errors", "timeline", "io", "overlap", "syncs", "crossrank", "graph", "findings", "report", "diff", "export")


@functools.cache
def _parse(text: str, filename: str) -> ast.Module:
    return ast.parse(text, filename)


def parsed(path: Path) -> ast.Module:
    """The file's syntax tree, parsed once per content for the whole module (the checks only read it)."""
    return _parse(path.read_text(), str(path))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            found[module_name(path)] = path
    return found


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports anywhere in its file (top level or inside functions)."""
    is_package = path.name == "__init__.py"
    here = name.split(".") if is_package else name.split(".")[:-1]
    targets: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base_parts = here[: len(here) - node.level + 1] if node.level else []
            base = ".".join(base_parts + ([node.module] if node.module else []))
            # `from pkg import mod` needs pkg.mod (pkg's __init__ need only have started); `from pkg import
            # name` needs pkg itself
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            candidates = subs + ([base] if len(subs) < len(node.names) else [])
        else:
            continue
        for c in candidates:
            if c in known and c != name:
                targets.add(c)
    return targets


def import_graph() -> dict[str, set[str]]:
    modules = source_modules()
    known = set(modules)
    return {name: imported_modules(name, path, known) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_cycle_finder_sees_a_circle_and_passes_a_chain():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_graph_resolves_relative_and_function_level_imports(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    mod = pkg / "mod.py"
    mod.write_text("from . import other\n\ndef f():\n    from .third import x\n")
    known = {"pkg", "pkg.mod", "pkg.other", "pkg.third"}
    assert imported_modules("pkg.mod", mod, known) == {"pkg.other", "pkg.third"}
    mod.write_text("from . import other, VALUE\n")
    assert imported_modules("pkg.mod", mod, known) == {"pkg", "pkg.other"}


def missing_imports(name: str, path: Path, known: set[str]) -> list[str]:
    """Project modules `name` imports that do not exist in this tree (relative imports resolved)."""
    is_package = path.name == "__init__.py"
    here = name.split(".") if is_package else name.split(".")[:-1]
    wanted = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            wanted += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base_parts = here[: len(here) - node.level + 1] if node.level else []
            wanted.append(".".join(base_parts + ([node.module] if node.module else [])))
    return [w for w in wanted if w.split(".")[0] in PACKAGES and w not in known]


def test_graph_sees_an_import_of_a_module_that_is_gone(tmp_path):
    mod = tmp_path / "mod.py"
    mod.write_text("from .timeline import x\nfrom viz.lod import y\nimport numpy\n")
    assert missing_imports("app.mod", mod, {"app", "app.mod", "viz", "viz.lod"}) == ["app.timeline"]


def test_every_project_import_exists():
    """A moved module leaves no import behind: with an editable install of another checkout on the path,
    such an import would quietly load that checkout's copy."""
    modules = source_modules()
    known = set(modules)
    gone = [f"{name} imports {m}" for name, path in modules.items() for m in missing_imports(name, path, known)]
    assert not gone, "imports of modules that do not exist: " + "; ".join(gone)


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_analyzer_layers_import_one_way():
    wrong = []
    for name, targets in import_graph().items():
        if not name.startswith("analyzers."):
            continue
        layer = LAYERS.index(name.split(".")[1])
        for t in targets:
            if t.startswith("analyzers.") and LAYERS.index(t.split(".")[1]) > layer:
                wrong.append(f"{name} imports {t}")
    assert not wrong, "analyzers import up the layers: " + "; ".join(sorted(wrong))


def test_analyzers_import_no_renderer():
    """Analyses return data: nothing under analyzers/ imports the CLI, the app, torch or streamlit."""
    forbidden = ("overlapscope", "app", "torch", "streamlit", "runners")
    wrong = []
    for path in sorted((ROOT / "analyzers").rglob("*.py")):
        for node in ast.walk(parsed(path)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            wrong += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in forbidden]
    assert not wrong, wrong


def package_crossings(graph: dict[str, set[str]]) -> list[str]:
    """Imports from a package into one FORBIDDEN_PACKAGE_IMPORTS keeps it from."""
    wrong = []
    for name, targets in graph.items():
        banned = FORBIDDEN_PACKAGE_IMPORTS.get(name.split(".")[0], ())
        wrong += [f"{name} imports {t}" for t in sorted(targets) if t.split(".")[0] in banned]
    return sorted(wrong)


def test_crossing_finder_sees_each_forbidden_direction():
    graph = {"app.views.x": {"overlapscope.render", "viz.figures"}, "overlapscope.cmd": {"app.data", "viz.lod"},
             "viz.figures": {"app.ui", "analyzers.report"}, "viz.lod": {"viz.formats"}}
    assert package_crossings(graph) == ["app.views.x imports overlapscope.render", "overlapscope.cmd imports app.data",
                                        "viz.figures imports app.ui"]
    assert package_crossings({"app.x": {"viz.lod"}, "overlapscope.y": {"viz.lod", "analyzers.report"}}) == []


def test_front_ends_are_siblings_on_viz():
    """overlapscope/ (CLI) and app/ (dashboard) never import each other; viz/ imports neither."""
    wrong = package_crossings(import_graph())
    assert not wrong, "imports across the front ends: " + "; ".join(wrong)


def test_viz_needs_no_dashboard():
    """The HTML report and the figures work without Streamlit (and torch): nothing in viz/ imports them."""
    wrong = []
    for path in sorted((ROOT / "viz").rglob("*.py")):
        for node in ast.walk(parsed(path)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            wrong += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in ("streamlit", "torch")]
    assert not wrong, wrong


def test_every_analyzers_module_is_in_a_layer():
    for name in source_modules():
        if name.startswith("analyzers."):
            assert name.split(".")[1] in LAYERS, f"{name}: add its package to LAYERS (in import order)"


@pytest.mark.parametrize("package", SIZE_CHECKED)
def test_modules_stay_small(package):
    too_long = []
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        n = len(path.read_text().splitlines())
        if n > MAX_LINES and rel not in SIZE_ALLOW_LIST:
            too_long.append(f"{rel} ({n} lines)")
    assert not too_long, f"modules over {MAX_LINES} lines (split them by job): " + ", ".join(too_long)


def test_every_module_says_its_job():
    missing = [str(p.relative_to(ROOT)) for pkg in SIZE_CHECKED for p in sorted((ROOT / pkg).rglob("*.py"))
               if p.read_text().strip() and ast.get_docstring(parsed(p)) is None]
    assert not missing, "modules without an opening docstring: " + ", ".join(missing)
