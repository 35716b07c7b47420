"""The dashboard against hostile inputs: manifests that lead out of the allowed roots,
uploads whose names collide, hold a NUL or are 300 characters long, upload folders left behind, and trace
names that try to become Markdown (images that fetch a URL, links, HTML, forged rows) on every page.

Pages run under Streamlit's AppTest; tests/test_hostile_round3_browser.py shows the same run in Chromium.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from analyzers.errors import BadInputError
from analyzers.io.load import load_traces
from app import data, uploads

from .conftest import ROOT
from .hostile_names import CONTROL, HOSTILE_KERNEL, hostile_run

MAIN = str(ROOT / "app" / "main.py")
KINETO = ROOT / "sample_traces" / "ag-gemm" / "baseline"
TIMEOUT = 300
PAGES = ("views/overview.py", "views/timeline.py", "views/crossrank.py", "views/collectives.py", "views/syncs.py",
         "views/stragglers.py", "views/diff.py", "views/run.py")


# --------------------------------------------------------------------------- manifests and allowed roots


def _run_with_manifest(folder: Path, traces: dict[str, str]) -> Path:
    folder.mkdir(parents=True)
    for r in (0, 1):
        shutil.copy(KINETO / f"rank{r}.json.gz", folder / f"rank{r}.json.gz")
    (folder / "manifest.json").write_text(json.dumps({"status": "ok", "algorithm": "demo", "variant": "x",
                                                      "traces": traces}))
    return folder


@pytest.fixture()
def escape_tree(tmp_path: Path) -> tuple[Path, Path]:
    """An allowed root holding runs whose manifests name files outside it; the outside holds real traces."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    for r in (0, 1):
        shutil.copy(KINETO / f"rank{r}.json.gz", outside / f"secret{r}.json.gz")
    _run_with_manifest(root / "relative", {"0": "../../outside/secret0.json.gz", "1": "../../outside/secret1.json.gz"})
    _run_with_manifest(root / "absolute", {str(r): str(outside / f"secret{r}.json.gz") for r in (0, 1)})
    linked = _run_with_manifest(root / "linked", {"0": "in0.json.gz", "1": "rank1.json.gz"})
    (linked / "in0.json.gz").symlink_to(outside / "secret0.json.gz")
    nul = _run_with_manifest(root / "nul", {"0": "rank0.json.gz\u0000x", "1": "rank1.json.gz"})
    assert nul.is_dir()
    outside_manifest = outside / "manifest.json"
    outside_manifest.write_text(json.dumps({"status": "ok", "algorithm": "demo", "variant": "leak",
                                            "secret": "outside-manifest"}))
    by_link = _run_with_manifest(root / "manifest-link", {})
    (by_link / "manifest.json").unlink()
    (by_link / "manifest.json").symlink_to(outside_manifest)
    return root, outside


def _opened(sources: list[data.Source]) -> list[Path]:
    from analyzers.io.discover import expand_paths

    return [f.resolve() for s in sources for f in expand_paths(list(s.paths))]


def test_a_manifest_never_opens_files_outside_its_folder(escape_tree: tuple[Path, Path],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    root, outside = escape_tree
    samples = data.discover_samples(root)
    files = _opened(samples)
    assert files and not [f for f in files if f.is_relative_to(outside.resolve())], files
    assert all(s.manifest() is None or "secret" not in s.manifest() for s in samples)
    for run in ("relative", "absolute", "linked", "nul", "manifest-link"):
        folder = root / run
        for src in data.sources_from_paths([str(folder)]):
            assert not [f for f in _opened([src]) if f.is_relative_to(outside.resolve())], run
        roots = [root.resolve()]
        try:
            src = data.server_source(str(folder), roots)
        except BadInputError as exc:  # refused in one line (the link in "linked"): fine, nothing read
            assert "outside the allowed roots" in str(exc), exc
            continue
        assert not [f for f in _opened([src]) if f.is_relative_to(outside.resolve())], run


def test_a_manifest_linked_from_outside_is_not_read(escape_tree: tuple[Path, Path]) -> None:
    root, _ = escape_tree
    assert data.read_manifest(root / "manifest-link" / "manifest.json") is None
    assert data.read_manifest(root / "relative" / "manifest.json")["variant"] == "x"


# --------------------------------------------------------------------------- uploads


def test_uploads_with_colliding_names_are_two_files(tmp_path: Path) -> None:
    a, b = (KINETO / "rank0.json.gz").read_bytes(), (KINETO / "rank1.json.gz").read_bytes()
    src = uploads.save_uploads([("x(1).json.gz", a), ("x[1].json.gz", b), ("X{1}.json.gz", a)], tmp_path)
    saved = [Path(p) for p in src.paths]
    assert len({p.name.lower() for p in saved}) == 3 and [p.read_bytes() for p in saved] == [a, b, a]
    uploads.discard_upload(src)


def test_two_rank_0_uploads_are_refused_not_one_replacing_the_other(tmp_path: Path) -> None:
    """Both files say rank 0 (distributedInfo); under names that sanitize alike, the first must not vanish:
    the load sees both and refuses the duplicate rank in one line."""
    a = (KINETO / "rank0.json.gz").read_bytes()
    src = uploads.save_uploads([("rank0(1).json.gz", a), ("rank0[1].json.gz", a)], tmp_path)
    assert len(set(src.paths)) == 2
    with pytest.raises(BadInputError, match="rank 0|duplicate"):
        load_traces(list(src.paths))
    uploads.discard_upload(src)


@pytest.mark.parametrize("name", ["a\x00b.json", "\x00.json", "x" * 300 + ".json.gz", "é" * 200 + ".sqlite",
                                  "../" * 50 + "r.json", "C:\\dir\\rank0.json", "\x1b[2J<img src=x>.json", ".json",
                                  "con.json", "a/b/../../../etc/passwd.json"])
def test_hostile_upload_names_are_saved_under_a_short_safe_name(name: str, tmp_path: Path) -> None:
    src = uploads.save_uploads([(name, b"{}")], tmp_path)
    (path,) = (Path(p) for p in src.paths)
    assert path.parent.parent == tmp_path and path.is_file() and path.read_bytes() == b"{}"
    assert len(path.name.encode()) <= 120 and re.fullmatch(r"[A-Za-z0-9._-]+", path.name) and not path.name[0] == "."
    uploads.discard_upload(src)
    assert not path.parent.exists()


@pytest.mark.parametrize("name", ["a\x00b.txt", "\x1b]0;t\x07" + "y" * 300 + ".exe"])
def test_refused_upload_names_are_one_line_without_control_characters(name: str, tmp_path: Path) -> None:
    with pytest.raises(data.UploadRejected) as info:
        uploads.save_uploads([(name, b"{}")], tmp_path)
    text = str(info.value)
    assert "\n" not in text and not CONTROL.search(text) and len(text) < 300 and "not a trace file" in text


def test_old_upload_folders_are_removed_and_others_kept(tmp_path: Path) -> None:
    old = tmp_path / f"{uploads.UPLOAD_PREFIX}old"
    fresh = tmp_path / f"{uploads.UPLOAD_PREFIX}fresh"
    other = tmp_path / "someone-elses"
    for d in (old, fresh, other):
        d.mkdir()
        (d / "rank0.json").write_text("{}")
    past = time.time() - uploads.UPLOAD_MAX_AGE_S - 60
    os.utime(old, (past, past))
    os.utime(other, (past, past))
    src = uploads.save_uploads([("rank0.json", b"{}")], tmp_path)  # saving one sweeps the stale ones
    assert not old.exists() and fresh.exists() and other.exists() and Path(src.paths[0]).exists()
    uploads.discard_upload(src)


def test_upload_folders_made_here_go_when_the_server_exits(tmp_path: Path) -> None:
    srcs = [uploads.save_uploads([("rank0.json", b"{}")], tmp_path) for _ in range(2)]
    folders = [Path(s.paths[0]).parent for s in srcs]
    assert all(f.is_dir() for f in folders) and set(folders) <= uploads._MADE_HERE
    uploads._remove_made_here()  # what atexit runs
    assert not any(f.exists() for f in folders)


# --------------------------------------------------------------------------- pages (AppTest)


@pytest.fixture(scope="module")
def hostile_samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile-samples")
    run = hostile_run(root, folder="x ![i](http://evil.example/run.png) <img src=x onerror=alert(1)> [/dim] |r")
    (run / "manifest.json").write_text(json.dumps({
        "status": "ok", "algorithm": "demo", "variant": "baseline", "world_size": 2, "profiler": "torch",
        "variant_help": "![pixel](http://evil.example/help.png) <b>bold</b> [link](https://evil.example)",
        "gpus": ["H100 ![g](http://evil.example/g.png)"], "timings_ms": {"![t](http://evil.example/t.png)": 1.0}}))
    shutil.copytree(run, root / "twin")  # a second run: the Diff page compares two
    return root


@pytest.fixture()
def hostile_app_env(hostile_samples: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv(data.ENV_SAMPLES, str(hostile_samples))
    for var in (data.ENV_ALLOWED_ROOTS, data.ENV_APP_PATHS, data.ENV_MAX_UPLOAD_MB):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(data.ENV_RUNS_DIR, str(tmp_path / "runs"))
    monkeypatch.setenv("OVERLAPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    return hostile_samples


def _markdown_values(at) -> list[str]:
    """Every string the page hands Streamlit's Markdown renderer."""
    out = []
    for kind in ("markdown", "caption", "title", "header", "subheader", "error", "warning", "info", "success"):
        out += [str(e.value) for e in at.get(kind)]
    out += [str(e.label) for e in at.get("expander")]
    return out


def _active_markdown(text: str) -> list[str]:
    """What in a Markdown string would be read as an image, a link, raw HTML or a control sequence."""
    bare = re.sub(r"\\.", "", text)  # backslash escapes are text
    found = re.findall(r"!?\[[^\]]*\]\([^)]*\)|<[a-zA-Z/][^>]*>|(?<![\\])https?://|www\.", bare)
    return found + CONTROL.findall(text)


def test_every_page_shows_hostile_names_as_text(hostile_app_env: Path) -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT)
    at.run()
    keys = [k for k in at.session_state["os_selected"]]
    assert len(keys) == 2, keys
    seen_hostile = False
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        for text in _markdown_values(at):
            assert not _active_markdown(text), (page, text[:300])
            seen_hostile |= "evil" in text or "onerror" in text
    assert seen_hostile  # the names were on the pages, as text


def test_the_finding_naming_a_hostile_kernel_is_text(hostile_app_env: Path) -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT)
    at.run()
    assert not at.exception
    labels = [e.label for e in at.expander if "SMs held by" in str(e.label)]
    assert labels and all("&lt;img src=x onerror=alert&gt;\\!\\[i\\]" in str(label) for label in labels), labels
    assert HOSTILE_KERNEL not in " ".join(_markdown_values(at))


def test_app_tables_show_formula_names_neutralised_and_figures_as_they_are() -> None:
    """Streamlit's CSV download of a table writes its cells as shown: a name a spreadsheet would run starts
    with ', a figure stays a figure."""
    from app.tables import readable

    from .hostile_names import FORMULA, FORMULA_NAMES

    table = readable([{"name": FORMULA, "total_ns": -1_500_000, "overlap_ratio": 0.5, "caller": FORMULA_NAMES[3]},
                      {"name": "gemm", "total_ns": 2_000_000, "overlap_ratio": None, "caller": "-2"}])
    cells = [c for col in table.columns for c in table[col]]
    assert "'" + FORMULA in cells and "'" + FORMULA_NAMES[3] in cells and "gemm" in cells and "-2" in cells
    assert "-1.500" in cells and "50.0%" in cells


def test_an_upload_folder_goes_when_its_session_ends(tmp_path: Path) -> None:
    """The sidebar keeps an UploadGuard in the session's state; when Streamlit drops the session, the guard is
    freed and the folder removed."""
    import gc

    src = uploads.save_uploads([("rank0.json", b"{}")], tmp_path)
    folder = Path(src.paths[0]).parent
    state = {"guards": [uploads.UploadGuard(src)]}
    assert folder.is_dir()
    del state
    gc.collect()
    assert not folder.exists() and folder not in uploads._MADE_HERE


def test_a_run_with_a_rank_without_gpu_work_opens_on_every_page(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """HostTablesLeftInWorker ended the Overview of such a run (the rank's worker results were discarded)."""
    import gzip

    from streamlit.testing.v1 import AppTest

    run = tmp_path / "samples" / "demo" / "no-gpu-rank"
    run.mkdir(parents=True)
    for r in (0, 1):
        doc = json.loads(gzip.decompress((KINETO / f"rank{r}.json.gz").read_bytes()))
        if r == 1:
            doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in ("kernel", "gpu_memcpy",
                                                                                        "gpu_memset")]
        (run / f"rank{r}.json").write_text(json.dumps(doc))
    (run / "manifest.json").write_text(json.dumps({"status": "ok", "algorithm": "demo", "variant": "no-gpu-rank"}))
    monkeypatch.setenv(data.ENV_SAMPLES, str(tmp_path / "samples"))
    for var in (data.ENV_ALLOWED_ROOTS, data.ENV_APP_PATHS):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OVERLAPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT)
    at.run()
    for page in PAGES[:6]:
        at.switch_page(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        assert not [e.value for e in at.error if "HostTables" in str(e.value) or "worker" in str(e.value)], page
