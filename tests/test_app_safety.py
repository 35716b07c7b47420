"""The dashboard as an attack surface: where it listens, which paths a browser can make it
read, what it does with uploads, what it never shows, and what one session can see of another's.
Each attack is a test, under Streamlit's AppTest (the browser checks are in test_app_browser.py).
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from app import data, uploads

from .conftest import NSYS_TRACES, ROOT
from .test_app import KINETO_PAIR, make_samples

MAIN = str(ROOT / "app" / "main.py")
SECRETS = ("hf_SECRETtoken1234", "SECRETARG5678", "SECRETSYS9012")


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_samples(tmp_path_factory.mktemp("samples"))


@pytest.fixture()
def app_env(samples: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv(data.ENV_SAMPLES, str(samples))
    for var in (data.ENV_ALLOWED_ROOTS, data.ENV_APP_PATHS, data.ENV_MAX_UPLOAD_MB):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(data.ENV_RUNS_DIR, str(tmp_path / "runs"))
    return samples


def page_text(at) -> str:
    """Every element the page sent (protos as text: markdown, tables' Arrow bytes, charts, code)."""
    out: list[str] = []

    def walk(node) -> None:
        proto = getattr(node, "proto", None)
        if proto is not None:
            out.append(str(proto))
        children = getattr(node, "children", None)
        if isinstance(children, dict):
            for child in children.values():
                walk(child)

    walk(at._tree)
    return "\n".join(out)


def _app(query: dict[str, str] | None = None):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(MAIN, default_timeout=180)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    return at


# --------------------------------------------------------------------------- where it listens


def test_binds_to_localhost_with_xsrf_on_unless_told(capsys: pytest.CaptureFixture[str]) -> None:
    from overlapscope.cli import main

    assert main(["app", "--dry-run"]) == 0
    cmd = capsys.readouterr().out
    assert "--server.address 127.0.0.1" in cmd and "--server.enableXsrfProtection true" in cmd
    assert main(["app", "--dry-run", "--address", "0.0.0.0"]) == 0
    cmd = capsys.readouterr().out
    assert "--server.address 0.0.0.0" in cmd and "--server.enableXsrfProtection true" in cmd  # still on


def test_a_config_that_turns_xsrf_off_is_overridden(tmp_path: Path) -> None:
    """A .streamlit/config.toml in the user's folder cannot switch XSRF protection off: the flag wins."""
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "config.toml").write_text("[server]\nenableXsrfProtection = false\n")
    probe = ("import sys; from streamlit.web import bootstrap; from streamlit import config\n"
             "print(str(config.get_option('server.enableXsrfProtection')).lower())\n"  # the config file alone
             "flags = dict(zip(sys.argv[1::2], sys.argv[2::2]))\n"
             "bootstrap.load_config_options({k.lstrip('-').replace('.', '_'): v for k, v in flags.items()})\n"
             "print(str(config.get_option('server.enableXsrfProtection')).lower())\n")
    from overlapscope.cmd_app import streamlit_command

    cmd = streamlit_command([], port=8599, address="127.0.0.1", max_upload_mb=10)
    flags = cmd[cmd.index("--server.headless"):cmd.index("--")]
    done = subprocess.run([sys.executable, "-c", probe, *flags], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.split() == ["false", "true"], (done.stdout, done.stderr)


# --------------------------------------------------------------------------- paths a browser can name


@pytest.mark.parametrize("runs", ["../../../../etc/passwd", "/etc/passwd", "server:/etc", "path:/etc/passwd",
                                  "upload:overlapscope-upload-x:rank0.json", "sample:../../etc"])
def test_runs_link_cannot_name_a_path(app_env: Path, runs: str) -> None:
    at = _app({"runs": runs})
    assert not at.exception
    srcs = at.session_state["os_sources"]
    assert all(k.startswith("sample:") for k in srcs)  # the link selects among known runs, it adds none
    assert all(k in srcs for k in at.session_state["os_selected"])


def _escapes(root: Path, outside: Path) -> dict[str, str]:
    (root / "escape.json").symlink_to(outside)
    (root / "escape-dir").symlink_to(outside.parent, target_is_directory=True)
    return {
        "dot-dot": str(root / ".." / outside.parent.name / outside.name),
        "absolute": str(outside),
        "system file": "/etc/passwd",
        "relative": f"../{outside.parent.name}/{outside.name}",
        "symlinked file": str(root / "escape.json"),
        "symlinked folder": str(root / "escape-dir"),
        "home": "~/.bashrc",
    }


@pytest.mark.parametrize("kind", ["dot-dot", "absolute", "system file", "relative", "symlinked file",
                                  "symlinked folder", "home"])
def test_path_box_is_confined_to_the_allowed_roots(app_env: Path, tmp_path: Path, hta_dir: Path,
                                                   monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    secret_dir = tmp_path / "private"
    secret_dir.mkdir()
    outside = secret_dir / "rank0.json.gz"
    shutil.copy(hta_dir / KINETO_PAIR[0], outside)  # a real trace: only the root check stands in the way
    monkeypatch.setenv(data.ENV_ALLOWED_ROOTS, str(root))
    at = _app()
    at.sidebar.text_input(key="os_server_path").set_value(_escapes(root, outside)[kind])
    at.sidebar.button[0].click().run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and errors[0].startswith("Server path refused:"), errors
    assert "outside the allowed roots" in errors[0] or "absolute path" in errors[0], errors
    assert not any(k.startswith("server:") for k in at.session_state["os_sources"])


# --------------------------------------------------------------------------- uploads


def test_upload_folder_is_private_and_names_are_stripped(tmp_path: Path) -> None:
    src = uploads.save_uploads([("../../x/rank0 ✓.json", b"{}")], tmp_path)
    folder = Path(src.paths[0]).parent
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700  # other local users cannot read an upload
    assert folder.parent == tmp_path and Path(src.paths[0]).name == "rank0_.json"
    uploads.discard_upload(src)


def test_sessions_do_not_see_each_others_uploads(app_env: Path, hta_dir: Path) -> None:
    first = _app()
    files = [(n, (hta_dir / n).read_bytes(), "application/gzip") for n in KINETO_PAIR]
    first.sidebar.file_uploader[0].set_value(files).run()
    key = next(k for k in first.session_state["os_sources"] if k.startswith("upload:"))
    label = first.session_state["os_sources"][key].label
    second = _app({"runs": f"{key},{label}"})  # even knowing the key and label
    assert not any(k.startswith("upload:") for k in second.session_state["os_sources"])
    assert not any(k.startswith("upload:") for k in second.session_state["os_selected"])
    assert Path(first.session_state["os_sources"][key].paths[0]).parent.name not in page_text(second)


# --------------------------------------------------------------------------- nothing private shown


def nsys_with_secrets(folder: Path) -> Path:
    """A real export whose capture metadata carries a token, a secret argument and a system variable."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ranks.sqlite"
    shutil.copy(NSYS_TRACES / "h100_2gpu_1s.sqlite", path)
    with sqlite3.connect(path) as conn:
        conn.executemany("INSERT INTO META_DATA_CAPTURE (name, value) VALUES (?, ?)", [
            ("PROCESS_0:ENVIRONMENT_VARIABLE", f"HF_TOKEN={SECRETS[0]}"),
            ("PROCESS_0:ARGUMENT_2", f"--api-key={SECRETS[1]}"),
        ])
        conn.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV (globalVid, devStateName, name, nameEnum, value) "
                     "VALUES (281474976710656, 'Local (CLI)', 'AWS_SECRET', 999, ?)", (SECRETS[2],))
    conn.close()
    return path


def test_cli_output_never_carries_the_traced_environment(tmp_path: Path) -> None:
    path = nsys_with_secrets(tmp_path / "run")
    for fmt in ("json", "md", "table", "csv"):
        done = subprocess.run([sys.executable, "-m", "overlapscope", "analyze", str(path), "-f", fmt], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert not [s for s in SECRETS if s in done.stdout + done.stderr], fmt


def test_app_pages_never_show_the_traced_environment(app_env: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "secret-run"
    nsys_with_secrets(run)
    (run / "manifest.json").write_text(json.dumps({
        "status": "ok", "algorithm": "demo", "variant": "secret", "world_size": 2, "profiler": "nsys",
        "traces": {"0": "ranks.sqlite"}, "env": {"NCCL_TOKEN": SECRETS[0]},
        "command": ["python", "-m", "runners.demo", f"--api-key={SECRETS[1]}"]}))
    monkeypatch.setenv(data.ENV_APP_PATHS, str(run))
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi: the Run page shows the command only
    at = _app()
    for page in ("overview", "timeline", "crossrank", "syncs", "diff", "run"):
        at.switch_page(f"views/{page}.py").run()
        assert not at.exception, page
        text = page_text(at)
        assert not [s for s in SECRETS if s in text], page
    # the recorded command line shows only when asked for
    at.toggle(key="run_show_command").set_value(True).run()
    assert SECRETS[1] in page_text(at) and SECRETS[0] not in page_text(at)


# --------------------------------------------------------------------------- no pickle of user data


def test_no_pickle_anywhere_user_data_flows() -> None:
    """Pickle runs code when loaded: nothing in the app, analyzers or CLI pickles or persists caches."""
    pattern = re.compile(r"^\s*(import pickle|from pickle|import dill|import shelve|import joblib)|persist\s*=",
                         re.MULTILINE)
    hits = [str(p.relative_to(ROOT)) for folder in ("app", "viz", "analyzers", "overlapscope")
            for p in (ROOT / folder).rglob("*.py") if pattern.search(p.read_text())]
    assert not hits, hits


def test_run_page_refuses_an_output_folder_holding_a_run(app_env: Path, tmp_path: Path) -> None:
    at = _app()
    at.switch_page("views/run.py").run()
    out = tmp_path / "earlier"
    out.mkdir()  # `overlapscope run` writes its run into OUT itself
    (out / "manifest.json").write_text("{}")
    at.text_input(key="run_out").set_value(str(out)).run()
    assert not at.exception
    assert any("already holds a run" in e.value for e in at.error), [e.value for e in at.error]
    assert "run_go" not in [b.key for b in at.button]
