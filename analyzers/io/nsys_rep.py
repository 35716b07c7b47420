""".nsys-rep reports: recognise them, find nsys, export them once to SQLite in the user cache."""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from analyzers.errors import BadInputError
from analyzers.io.atomic_write import private_path
from analyzers.io.nsys_cache import entry_paths, finish, in_cache, read_sidecar, reusable

SQLITE_MAGIC = b"SQLite format 3\x00"
REP_SUFFIXES = (".nsys-rep", ".qdrep")
# The first bytes of a report name the nsys that wrote it: "...Profiler Report 2024@6@2@25-...".
REP_VERSION = re.compile(rb"Profiler Report (\d{4})@(\d+)(?:@(\d+))?(?:@(\d+))?")
REP_HEADER_BYTES = 256
# Keeps NVTX payloads (NCCL's message sizes and communicators) as JSON; nsys versions that do not know
# the flag export without it (a usage error naming it is retried once without).
INCLUDE_JSON = ("--include-json", "true")
# Where nsys usually lives when it is not on PATH.
NSYS_INSTALL_GLOBS = (
    "/opt/nvidia/nsight-systems*/bin",
    "/opt/nvidia/nsight-systems/*/bin",
    "/opt/nvidia/nsight-systems*/target-linux-x64",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64",
    "/usr/local/cuda*/bin",
    "/usr/local/cuda*/nsight-systems*/bin",
)
# --------------------------------------------------------------------------------------------
# .nsys-rep: find nsys, export to the cache
# --------------------------------------------------------------------------------------------

def is_nsys_rep(path: str | Path) -> bool:
    """True for an Nsight Systems report (by name or by its header), not for an SQLite export."""
    p = Path(path)
    if p.name.endswith(REP_SUFFIXES):
        return True
    try:
        with p.open("rb") as fh:
            head = fh.read(REP_HEADER_BYTES)
    except OSError:
        return False
    return not head.startswith(SQLITE_MAGIC) and REP_VERSION.search(head) is not None


def nsys_rep_version(path: str | Path) -> str | None:
    """The nsys version that wrote a report, from its header ("2024.6.2.25"), or None."""
    try:
        with Path(path).open("rb") as fh:
            head = fh.read(REP_HEADER_BYTES)
    except OSError:
        return None
    m = REP_VERSION.search(head)
    if not m:
        return None
    return ".".join(g.decode() for g in m.groups() if g is not None)


def find_nsys() -> str | None:
    """The nsys executable: $NSYS (file or folder), then PATH, then the usual install folders."""
    candidates: list[Path] = []
    env = os.environ.get("NSYS")
    if env:
        p = Path(env)
        candidates.append(p / "nsys" if p.is_dir() else p)
    on_path = shutil.which("nsys")
    if on_path:
        candidates.append(Path(on_path))
    for pattern in NSYS_INSTALL_GLOBS:
        # Newest install first (names carry the version).
        candidates += [Path(d) / "nsys" for d in sorted(glob.glob(pattern), reverse=True)]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return None


def export_command(path: Path, output: Path | None = None) -> str:
    """The exact shell command that exports a report to SQLite (absolute paths: a report named "--output=x"
    must reach nsys as a file, never as an option)."""
    path = path.absolute()
    out = (output if output is not None else path.with_name(path.name.rsplit(".", 1)[0] + ".sqlite")).absolute()
    flags = " ".join(INCLUDE_JSON)
    return f"nsys export --type sqlite {flags} --output {shlex.quote(str(out))} {shlex.quote(str(path))}"


def nsys_rep_to_sqlite(path: str | Path) -> Path:
    """Export a .nsys-rep with the user's nsys into the cache (reused while the report is unchanged)."""
    path = Path(path)
    if not path.is_file():
        raise BadInputError(path, "no such file")
    out, _ = entry_paths(path, "export " + " ".join(INCLUDE_JSON))
    if reusable(out):
        return out
    version = nsys_rep_version(path)
    written_by = f"written by nsys {version}" if version else "nsys version unknown"
    nsys = find_nsys()
    if nsys is None:
        raise BadInputError(
            path, f"Nsight Systems report ({written_by}) and no nsys here to read it (looked in $NSYS, "
                  f"PATH, /opt/nvidia, /usr/local/cuda*); export it with nsys {version or ''} or newer: "
                  f"`{export_command(path)}`, then load the .sqlite".replace("  ", " "))
    out.parent.mkdir(parents=True, exist_ok=True)
    with private_path(out) as tmp:  # a private folder: no planted file or link under a guessable name
        with_json = _export(nsys, path, tmp, written_by)
        finish(out, tmp, {"source": str(path), "nsys": nsys, "report_version": version, "include_json": with_json})
    return out


def _export(nsys: str, path: Path, tmp: Path, written_by: str) -> bool:
    """Run nsys export of path into tmp; whether the JSON payloads were included. The report is passed as an
    absolute path, so a name starting with "-" can never be read as an option."""
    cmd = [nsys, "export", "--type", "sqlite", "--output", str(tmp), str(path.absolute())]
    with_json = True
    proc = subprocess.run(cmd[:4] + list(INCLUDE_JSON) + cmd[4:], capture_output=True, text=True, check=False)
    if proc.returncode != 0 and INCLUDE_JSON[0].lstrip("-") in (proc.stderr or "") + (proc.stdout or ""):
        with_json = False  # an nsys older than the flag: export what it can
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not tmp.is_file():
        lines = [ln.strip() for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
        why = lines[-1] if lines else f"exit status {proc.returncode}"
        raise BadInputError(path, f"nsys export failed ({why}); report {written_by}, nsys used: {nsys}")
    return with_json


def export_notes(sqlite_path: Path) -> list[str]:
    """What the cached export of a report lacks because of the nsys that made it."""
    side = read_sidecar(sqlite_path) if in_cache(sqlite_path) else None
    if side is not None and side.get("include_json") is False:
        return [f"exported by nsys {side.get('nsys', '')}, which does not know `--include-json`: NVTX payloads "
                "(NCCL message sizes) are not in this export"]
    return []


def _source_label(sqlite_path: Path) -> str | None:
    """The report a cached export was made from (so traces name the user's file, not the cache)."""
    side = read_sidecar(sqlite_path) if in_cache(sqlite_path) else None
    return str(side["source"]) if side is not None and "source" in side else None
