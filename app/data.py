"""Where the app's traces come from, and which of them it may read.

Three sources: the bundled sample traces (sample_traces/<algo>/<variant>/manifest.json),
paths given on the command line, and server paths / uploads chosen in the browser. A
browser user must not be able to read arbitrary server files, so server paths are only
accepted under the allowed roots (OVERLAPSCOPE_ALLOWED_ROOTS, else sample_traces plus the
command-line paths), after resolving symlinks. Uploads are size-capped and extension-checked
before they touch the loaders.

Plain Python (no streamlit): the Streamlit layer (app/ui.py) adds caching keyed by
`fingerprint`, i.e. by (path, size, mtime) of every file, so an edited file is re-read.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analyzers.errors import BadInputError
from analyzers.io.discover import expand_paths
from analyzers.io.load import load_traces
from analyzers.timeline.model import TraceSet

REPO_ROOT = Path(__file__).resolve().parents[1]
ENV_SAMPLES = "OVERLAPSCOPE_SAMPLES"
ENV_ALLOWED_ROOTS = "OVERLAPSCOPE_ALLOWED_ROOTS"
ENV_MAX_UPLOAD_MB = "OVERLAPSCOPE_MAX_UPLOAD_MB"
ENV_APP_PATHS = "OVERLAPSCOPE_APP_PATHS"  # how `overlapscope app PATH...` hands paths to the script
DEFAULT_MAX_UPLOAD_MB = 200
UPLOAD_SUFFIXES = (".json", ".json.gz", ".sqlite")
# Environment variables can hold secrets; manifests keep the runner's, the app never shows them.
PRIVATE_MANIFEST_KEYS = ("env",)
# The bundled samples the app opens on: a broken schedule (a host sync per step: no overlap, a critical
# host-blocking-sync finding) and its fix (comm hidden behind the GEMM, nothing critical found).
OPENING_SAMPLES = ("ag-gemm/host-sync", "ag-gemm/tuned")

Fingerprint = tuple[tuple[str, int, int], ...]


class PathNotAllowed(BadInputError):
    """A server path outside the allowed roots (or escaping them through a symlink)."""


class UploadRejected(BadInputError):
    """An upload that is too large, of the wrong type, or empty."""


@dataclass(frozen=True)
class Source:
    """One run the app can show: its files, where it came from and a label for the user."""

    key: str  # unique among the app's sources
    label: str
    kind: str  # "sample" | "path" | "server" | "upload" | "run"
    paths: tuple[str, ...]
    manifest_path: str | None = None
    group: str = ""  # the algorithm, for samples (how the picker groups them)

    def manifest(self) -> dict[str, Any] | None:
        return read_manifest(Path(self.manifest_path)) if self.manifest_path else None


# --------------------------------------------------------------------------- samples


def samples_root() -> Path:
    """The bundled sample traces (OVERLAPSCOPE_SAMPLES overrides, e.g. for tests)."""
    env = os.environ.get(ENV_SAMPLES)
    return Path(env) if env else REPO_ROOT / "sample_traces"


def read_manifest(path: Path) -> dict[str, Any] | None:
    """A runner manifest without its private parts (the process environment); None if unreadable, or if it
    is a link to a file outside its own folder (its content is shown on the Run page)."""
    if not _inside(path, path.parent):
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    return {k: v for k, v in doc.items() if k not in PRIVATE_MANIFEST_KEYS}


def _inside(path: Path, folder: Path) -> bool:
    """Whether path, every symlink followed, is folder (resolved) or lies under it."""
    try:
        real, root = path.resolve(strict=True), folder.resolve(strict=True)
    except (OSError, RuntimeError, ValueError):
        return False
    return real == root or real.is_relative_to(root)


def _manifest_traces(directory: Path, manifest: dict[str, Any]) -> list[Path]:
    """The trace files a manifest names (relative to its folder), else those in the folder. A name that leads
    out of the folder (../.., an absolute path, a link to elsewhere) is ignored: a manifest found under an
    allowed root must not open files outside it."""
    named = manifest.get("traces")
    if isinstance(named, dict) and named:
        files = [directory / str(v) for _, v in sorted(named.items(), key=lambda kv: str(kv[0]))]
        files = [p for p in files if "\0" not in str(p) and _inside(p, directory) and p.is_file()]
        if files:
            return files
    try:
        return expand_paths([directory])
    except BadInputError:
        return []


def discover_samples(root: Path | None = None) -> list[Source]:
    """Every folder under root with a manifest.json and trace files is one sample run."""
    root = root or samples_root()
    if not root.is_dir():
        return []
    out: list[Source] = []
    for mpath in sorted(root.rglob("manifest.json")):
        manifest = read_manifest(mpath)
        if manifest is None or manifest.get("status", "ok") != "ok":
            continue
        files = _manifest_traces(mpath.parent, manifest)
        if not files:
            continue
        rel = mpath.parent.relative_to(root).as_posix()
        algo = str(manifest.get("algorithm") or rel.split("/")[0])
        label = rel if rel != "." else str(manifest.get("variant") or mpath.parent.name)
        out.append(Source(key=f"sample:{rel}", label=label, kind="sample",
                          paths=tuple(str(p) for p in files), manifest_path=str(mpath), group=algo))
    return out


def opening_samples(samples: Sequence[Source], n: int = 2) -> list[str]:
    """Keys of the samples selected when the app opens with no paths: OPENING_SAMPLES when they are all
    there, else the first n of the first group (another samples folder, OVERLAPSCOPE_SAMPLES)."""
    by_label = {s.label: s.key for s in samples}
    if all(label in by_label for label in OPENING_SAMPLES):
        return [by_label[label] for label in OPENING_SAMPLES]
    first_group = [s for s in samples if s.group == samples[0].group] if samples else []
    return [s.key for s in (first_group or list(samples))[:n]]


# --------------------------------------------------------------------------- command-line paths


def command_line_paths(argv: Sequence[str] | None = None) -> list[str]:
    """Paths the app was started with: after `--` on `streamlit run`, or OVERLAPSCOPE_APP_PATHS."""
    if argv:
        return [a for a in argv if a and not a.startswith("-")]
    env = os.environ.get(ENV_APP_PATHS, "")
    return [p for p in env.split(os.pathsep) if p]


def sources_from_paths(paths: Iterable[str], kind: str = "path") -> list[Source]:
    """One source per directory given; files given together are grouped by their folder."""
    out: list[Source] = []
    by_parent: dict[Path, list[Path]] = {}
    for raw in paths:
        p = Path(raw).expanduser()
        runs = sorted(m.parent for m in p.rglob("manifest.json")) if p.is_dir() else []
        if p.is_dir() and not (p / "manifest.json").exists() and len(runs) > 1:
            out += sources_from_paths([str(r) for r in runs], kind)  # a folder of runs: one source each
            continue
        if p.is_dir():
            mpath = p / "manifest.json"
            manifest = read_manifest(mpath) if mpath.is_file() else None
            # A runner's folder also holds manifest.json and status files: read the traces it names.
            files = _manifest_traces(p, manifest) if manifest is not None else []
            out.append(Source(key=f"{kind}:{p.resolve()}", label=_short_label(p), kind=kind,
                              paths=tuple(str(f) for f in files) if files else (str(p),),
                              manifest_path=str(mpath) if manifest is not None else None))
        else:
            by_parent.setdefault(p.parent, []).append(p)
    for parent, files in by_parent.items():
        names = ",".join(sorted(f.name for f in files))
        label = files[0].name if len(files) == 1 else f"{_short_label(parent)} ({len(files)} files)"
        out.append(Source(key=f"{kind}:{parent.resolve()}:{names}", label=label, kind=kind,
                          paths=tuple(str(f) for f in files)))
    return out


def _short_label(p: Path) -> str:
    parts = p.resolve().parts
    return "/".join(parts[-2:]) if len(parts) >= 2 else str(p)


# --------------------------------------------------------------------------- allowed roots


def allowed_roots(cli_paths: Iterable[str] = ()) -> list[Path]:
    """OVERLAPSCOPE_ALLOWED_ROOTS (os.pathsep-separated) if set; else samples + command-line paths."""
    env = os.environ.get(ENV_ALLOWED_ROOTS)
    raw = [p for p in env.split(os.pathsep) if p] if env else [str(samples_root()), *cli_paths]
    roots: list[Path] = []
    for r in raw:
        try:
            resolved = Path(r).expanduser().resolve(strict=True)
        except (OSError, RuntimeError):
            continue  # a root that does not exist allows nothing
        if resolved not in roots:
            roots.append(resolved)
    return roots


def _within(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == r or path.is_relative_to(r) for r in roots)


def check_allowed(path: str | Path, roots: Sequence[Path]) -> Path:
    """The resolved path if it (after following every symlink) lies under an allowed root."""
    text = str(path).strip()
    if not text:
        raise PathNotAllowed("(empty)", "give a file or directory path")
    p = Path(text).expanduser()
    if not p.is_absolute():
        raise PathNotAllowed(text, "give an absolute path on the server")
    try:
        resolved = p.resolve(strict=True)
    except (OSError, RuntimeError):
        if not _within(Path(os.path.normpath(p)), roots):
            raise PathNotAllowed(text, "outside the allowed roots") from None
        if p.is_symlink():
            raise PathNotAllowed(text, "symbolic link to nothing (its target is missing, or links loop)") from None
        raise PathNotAllowed(text, "no such file or directory") from None
    if not _within(resolved, roots):
        raise PathNotAllowed(text, "outside the allowed roots"
                             + (f" (it resolves to {resolved})" if resolved != Path(os.path.normpath(p)) else ""))
    return resolved


def server_source(path: str, roots: Sequence[Path]) -> Source:
    """A source for a server path the user typed, refused unless every file is under a root.

    The directory walk may meet symlinks to files elsewhere; each found file is checked too.
    """
    resolved = check_allowed(path, roots)
    files = expand_paths([resolved])
    for f in files:
        check_allowed(f.absolute(), roots)
    src = sources_from_paths([str(resolved)] if resolved.is_dir() else [str(f) for f in files], kind="server")[0]
    for f in expand_paths(list(src.paths)):  # what the source will open, as its manifest names it
        check_allowed(f.absolute(), roots)
    return src


# --------------------------------------------------------------------------- uploads


def max_upload_mb() -> int:
    try:
        return max(1, int(os.environ.get(ENV_MAX_UPLOAD_MB, DEFAULT_MAX_UPLOAD_MB)))
    except ValueError:
        return DEFAULT_MAX_UPLOAD_MB


# --------------------------------------------------------------------------- loading


def fingerprint(paths: Iterable[str]) -> Fingerprint:
    """(path, size, mtime_ns) of every trace file the paths expand to: the cache key."""
    out = []
    for f in expand_paths(list(paths)):
        st = f.stat()
        out.append((str(f.resolve()), int(st.st_size), int(st.st_mtime_ns)))
    return tuple(out)


def load_analysis_set(fp: Fingerprint, label: str = "") -> TraceSet:
    """The files a fingerprint names, loaded as `overlapscope analyze` loads them (the Streamlit layer caches
    this by fp): the per-rank part of the analysis (metrics, syncs, findings, rank graphs) runs in the parse
    workers, which keep each rank's host tables and send back its GPU table packed (a third of the bytes)."""
    from analyzers.overlap.metrics import AnalysisOptions
    from analyzers.report import RankStage

    return load_traces([p for p, _, _ in fp], label=label, jobs=None, cache=True,
                       per_rank=RankStage(AnalysisOptions(), send_host_tables=False))


def load_fingerprinted(fp: Fingerprint, label: str = "") -> TraceSet:
    """The same files with every table, host tables included (the Timeline's step windows, the diff, the
    downloads); no per-rank analysis: by the time a page asks, the parse cache holds the files."""
    return load_traces([p for p, _, _ in fp], label=label, jobs=None, cache=True)


# --------------------------------------------------------------------------- reproducing a sample

ENV_RUNS_DIR = "OVERLAPSCOPE_RUNS_DIR"
ENV_ALLOW_RUN = "OVERLAPSCOPE_ALLOW_RUN"


def reproduce_command(manifest: dict[str, Any], out: str | Path) -> list[str]:
    """The `overlapscope run` command that makes this sample again, as a user types it.

    Built from the manifest's recorded facts (algorithm, variant, world size, profiler,
    parameters) rather than its literal command line, which names the original machine's
    interpreter and output folder; only parameters that differ from the defaults appear
    (runners/commands.py), so the test hooks show only where the run set them.
    """
    from runners.commands import user_command  # torch-free

    algo = str(manifest.get("algorithm") or "")
    variant = str(manifest.get("variant") or "")
    if not algo or not variant:
        raise ValueError("manifest names no algorithm/variant")
    params = manifest.get("params") or {}
    return user_command(algo, [variant], params if isinstance(params, dict) else {},
                        nproc=int(manifest.get("world_size") or 1), profiler=str(manifest.get("profiler") or "torch"),
                        out=out, cuda=manifest.get("backend") != "gloo")


def existing_run_files(out: str | Path, variant: str) -> list[Path]:
    """Files of an earlier run where the Run page's command writes (OUT; `overlapscope run` refuses it too)."""
    from runners.launch import run_files  # torch-free: the launcher only builds and watches torchrun

    text = str(out).strip()
    if not text:
        return []
    return run_files(Path(text).expanduser(), [variant])


def runs_root() -> Path:
    """Where runs started from the app write (OVERLAPSCOPE_RUNS_DIR, else the cache folder)."""
    env = os.environ.get(ENV_RUNS_DIR)
    if env:
        return Path(env)
    from analyzers.io.environment import cache_base

    return cache_base() / "runs"


def gpu_count() -> int:
    """NVIDIA GPUs visible here, from `nvidia-smi -L` (the app never imports torch)."""
    import subprocess

    exe = shutil.which("nvidia-smi")
    if not exe:
        return 0
    try:
        done = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in done.stdout.splitlines() if line.startswith("GPU "))


def running_allowed() -> bool:
    """Starting runs from the page can be switched off (OVERLAPSCOPE_ALLOW_RUN=0) on shared servers."""
    return os.environ.get(ENV_ALLOW_RUN, "1").strip().lower() not in ("0", "false", "no", "off")
