"""Launch runner algorithms through torchrun, enforce a timeout, name the failing rank.

This module imports no torch: the launching process only builds the torchrun
command (`python -m torch.distributed.run ... -m runners.<module>`), watches it,
and reads back the files the ranks wrote (manifest.json, traces, and on failure
rank{R}.error.json / rank{R}.status.json). It is what `overlapscope run` and
`overlapscope sweep` call; `python -m runners.launch` is a small CLI for GPU
hosts where overlapscope's own dependencies are not installed.

Several hosts are not launched from here: start the same module with torchrun's
own rendezvous on every host (see runners/README.md).
"""


from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runners.commands import build_command, find_nsys, grid_command, read_grid, shell_line, spec_of, user_command
from runners.diagnose import diagnose, rank_from_torchrun_log, teardown_crash
from runners.procs import KILL_GRACE_S, REPO_ROOT, ProgressFn, child_env, execute
from runners.results import (
    OutputExists,
    RunFailed,
    RunResult,
    Timings,
    chunk_spread_ms,
    format_table,
    read_json,
    read_result,
)
from runners.specs import ALGORITHMS, AlgorithmSpec, ParamValue

__all__ = ["ALGORITHMS", "KILL_GRACE_S", "AlgorithmSpec", "OutputExists", "RunFailed", "RunResult", "Timings",
           "build_command", "chunk_spread_ms", "clear_run", "find_nsys", "rank_from_torchrun_log", "run",
           "run_files", "sweep", "user_command", "workload_groups"]


def workload_groups(algo: str, variants: Sequence[str], baseline: str | None = None
                    ) -> list[tuple[str, str, list[str]]]:
    """(workload, its baseline, its variants) in the order given: only like is compared with like.

    Each group's baseline is `baseline` where it belongs to that group, else the group's
    variant named "baseline", else its first variant.
    """
    spec = spec_of(algo)
    groups: dict[str, list[str]] = {}
    for v in variants:
        groups.setdefault(spec.workload_of(v), []).append(v)
    out = []
    for name, members in groups.items():
        base = baseline if baseline in members else ("baseline" if "baseline" in members else members[0])
        out.append((name, base, members))
    return out


def _nsys_version(nsys: str) -> str:
    try:
        done = subprocess.run([nsys, "--version"], capture_output=True, text=True, timeout=60)
        return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _git_commit() -> str | None:
    """The commit the runners came from (+"-dirty" if runners/ has local changes), for the manifest."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "runners"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def runners_digest() -> str:
    """SHA-256 of the runner sources (runners/*.py and *.sh, sorted by name), first 16 hex digits.

    The git commit alone can mislead: a copied working tree may carry a stale .git. The
    digest names the code that actually ran, with or without git.
    """
    h = hashlib.sha256()
    for path in sorted([*REPO_ROOT.joinpath("runners").glob("*.py"), *REPO_ROOT.joinpath("runners").glob("*.sh")]):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


# Keeps NVTX payloads as JSON (NCCL's message sizes and communicators, read by analyzers/io/nsys_nccl.py).
NSYS_EXPORT_JSON = ("--include-json", "true")


def _export_one(nsys: str, rep: Path, sqlite: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, bool]:
    """One report exported (with NVTX payload JSON unless this nsys does not know the flag: then retried
    without it); the finished process and whether the JSON is in."""
    base = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true"]
    tail = ["--output", str(sqlite), str(rep)]
    done = subprocess.run(base + list(NSYS_EXPORT_JSON) + tail, capture_output=True, text=True, env=env)
    if done.returncode != 0 and NSYS_EXPORT_JSON[0].lstrip("-") in done.stderr + done.stdout:
        return subprocess.run(base + tail, capture_output=True, text=True, env=env), False
    return done, True


def _export_nsys(nsys: str, out: Path, keep_rep: bool, env: dict[str, str]) -> tuple[dict[int, Path], bool]:
    """Turn each rank{R}.nsys-rep into rank{R}.sqlite with the user's own nsys; whether every export
    holds the NVTX payload JSON."""
    reps = sorted(out.glob("rank*.nsys-rep"))
    if not reps:
        leftovers = sorted(p.name for p in out.glob("rank*.qdstrm"))
        hint = (f" (only {', '.join(leftovers)}: nsys could not import its raw data; on hosts without "
                "libdw.so.1/libelf.so.1 put them on LD_LIBRARY_PATH)") if leftovers else ""
        raise RunFailed(f"nsys wrote no .nsys-rep in {out}{hint}", rank=None, out_dir=out, log=None)
    traces: dict[int, Path] = {}
    all_json = True
    for rep in reps:
        sqlite = rep.with_suffix(".sqlite")
        done, with_json = _export_one(nsys, rep, sqlite, env)
        all_json &= with_json
        if done.returncode != 0 or not sqlite.exists():
            raise RunFailed(f"nsys export failed for {rep}: {done.stderr.strip()[-500:]}", rank=None,
                            out_dir=out, log=None)
        traces[int(rep.stem.removeprefix("rank"))] = sqlite
        if not keep_rep:
            rep.unlink()
    return traces, all_json


RUN_FILE_GLOBS = ("manifest.json", "manifest.failed.json", "launch.log", "rank[0-9]*")


def run_files(out: Path, variants: Sequence[str]) -> list[Path]:
    """Files of an earlier run in out (or out/<variant>/) that a new run would overwrite or mix with."""
    out = Path(out)
    dirs = [out] + ([out / v for v in variants] if len(variants) != 1 else [])
    found = {p for d in dirs if d.is_dir() for g in RUN_FILE_GLOBS for p in d.glob(g) if p.is_file()}
    return sorted(found)


def clear_run(out: Path, variants: Sequence[str]) -> list[Path]:
    """Remove an earlier run's files (only those run_files names: never anything else the folder holds)."""
    removed = run_files(out, variants)
    for p in removed:
        p.unlink(missing_ok=True)
    return removed


def _clear_stale(out: Path, variants: list[str]) -> None:
    """Old status/error/manifest files would mislead the diagnosis and results of this run."""
    dirs = [out] if len(variants) == 1 else [out / v for v in variants]
    for pattern in ("rank*.error.json", "rank*.status.json"):
        for p in out.glob(pattern):
            p.unlink()
    for d in dirs:
        for name in ("manifest.json", "manifest.failed.json"):
            (d / name).unlink(missing_ok=True)


def _launch(algo: str, variants: list[str], *, nproc: int, profiler: str, out: Path, params: dict[str, Any],
            timeout_s: float, on_progress: ProgressFn | None, keep_nsys_rep: bool) -> list[RunResult]:
    # absolute: torchrun runs in the repository root (so `-m runners.X` resolves), not in the caller's
    # directory, and a relative --out would land somewhere the caller never looks
    out = Path(out).resolve()
    existing = run_files(out, variants)
    if existing:  # never overwrite a run's outputs silently; callers clear_run() first when asked to
        raise OutputExists(out, existing)
    out.mkdir(parents=True, exist_ok=True)
    _clear_stale(out, variants)
    nsys = find_nsys() if profiler == "nsys" else None
    cmd = build_command(algo, variants, nproc=nproc, profiler=profiler, out=out, params=params, nsys=nsys)
    env = child_env()
    extra: dict[str, Any] = {"git_commit": _git_commit(), "runners_digest": runners_digest()}
    if nsys:
        extra["nsys"] = nsys
        extra["nsys_version"] = env["OVERLAPSCOPE_NSYS_VERSION"] = _nsys_version(nsys)
    if on_progress:
        on_progress(f"{algo} {','.join(variants)}: {nproc} processes, profiler {profiler}, out {out}")
    rc, log, wall = execute(cmd, out, timeout_s, on_progress, env)
    warning = teardown_crash(out, variants, nproc, log) if rc not in (0, None) else None
    if warning and on_progress:
        on_progress(f"warning: {warning}")
    if rc != 0 and not warning:
        msg, rank = diagnose(out, rc, timeout_s, log)
        _write_failed_manifest(out, algo, variants, cmd, params, msg, rank, profiler)
        raise RunFailed(f"{algo} {','.join(variants)}: {msg}", rank=rank, out_dir=out, log=log)
    results = []
    for v in variants:
        vdir = out if len(variants) == 1 else out / v
        res = read_result(algo, v, vdir, log, wall, cmd, extra)
        res.manifest["launch"]["reproduce"] = shell_line(user_command(
            algo, [v], res.manifest.get("params") or params, nproc=nproc, profiler=profiler,
            cuda=res.manifest.get("backend") == "nccl"))
        (vdir / "manifest.json").write_text(json.dumps(res.manifest, indent=1, default=str))
        if warning:
            res.manifest["launch_warning"] = warning
            (vdir / "manifest.json").write_text(json.dumps(res.manifest, indent=1, default=str))
        if nsys:
            res.traces, with_json = _export_nsys(nsys, vdir, keep_nsys_rep, env)
            res.manifest["traces"] = {str(r): p.name for r, p in res.traces.items()}
            res.manifest["nsys_export_json"] = with_json
            if not with_json and on_progress:
                on_progress(f"warning: nsys {extra.get('nsys_version') or ''} does not know `nsys export "
                            "--include-json`: exported without NVTX payloads (no NCCL message sizes)")
            (vdir / "manifest.json").write_text(json.dumps(res.manifest, indent=1, default=str))
        results.append(res)
    return results


def _write_failed_manifest(out: Path, algo: str, variants: list[str], cmd: list[str], params: dict[str, Any],
                           msg: str, rank: int | None, profiler: str) -> None:
    """A manifest for the failed run beside whatever outputs the ranks left (they are kept)."""
    record = {"status": "failed", "algorithm": algo, "variant": ",".join(variants), "profiler": profiler,
              "params": params, "error": msg, "failed_rank": rank, "launch": {"command": cmd}}
    (out / "manifest.failed.json").write_text(json.dumps(record, indent=1, default=str))


def run(algo: str, variant: str, *, nproc: int, profiler: str, out: Path, params: dict[str, Any] | None = None,
        timeout_s: float = 1800.0, on_progress: ProgressFn | None = None, keep_nsys_rep: bool = True) -> RunResult:
    """Run one variant of one algorithm on nproc local processes; raise RunFailed naming the rank."""
    return _launch(algo, [variant], nproc=nproc, profiler=profiler, out=Path(out), params=dict(params or {}),
                   timeout_s=timeout_s, on_progress=on_progress, keep_nsys_rep=keep_nsys_rep)[0]


def sweep(algo: str, variants: Sequence[str], *, nproc: int, profiler: str, out: Path,
          params: dict[str, Any] | None = None, timeout_s: float = 3600.0, on_progress: ProgressFn | None = None,
          keep_nsys_rep: bool = True) -> dict[str, RunResult]:
    """Run several variants, each into out/<variant>/.

    With torch.profiler or none, all variants share one torchrun launch (one process
    group init, same buffers); Nsight Systems profiles a whole process, so under nsys
    each variant gets its own launch.
    """
    variants = list(variants) or list(spec_of(algo).variants)
    out = Path(out)
    if profiler == "nsys":
        return {v: run(algo, v, nproc=nproc, profiler=profiler, out=out / v, params=params, timeout_s=timeout_s,
                       on_progress=on_progress, keep_nsys_rep=keep_nsys_rep) for v in variants}
    if len(variants) == 1:
        return {variants[0]: run(algo, variants[0], nproc=nproc, profiler=profiler, out=out / variants[0],
                                 params=params, timeout_s=timeout_s, on_progress=on_progress)}
    results = _launch(algo, variants, nproc=nproc, profiler=profiler, out=out, params=dict(params or {}),
                      timeout_s=timeout_s, on_progress=on_progress, keep_nsys_rep=keep_nsys_rep)
    return {r.variant: r for r in results}


def grid(algo: str, grid_file: Path, *, nproc: int, out: Path, iters: int = 30, retune: bool = False,
         timeout_s: float = 3600.0, on_progress: ProgressFn | None = None) -> dict[str, Any]:
    """Run runners.grid for one algorithm's shapes of a grid file; returns grid.json's document."""
    read_grid(grid_file, algo)  # one clear error before anything starts
    out = Path(out).resolve()
    if (out / "grid.json").exists():
        raise OutputExists(out, [out / "grid.json"])
    out.mkdir(parents=True, exist_ok=True)
    _clear_stale(out, ["grid"])
    cmd = grid_command(Path(grid_file).resolve(), out, algos=[algo], nproc=nproc, iters=iters, retune=retune)
    rc, log, _wall = execute(cmd, out, timeout_s, on_progress, child_env())
    doc = read_json(out / "grid.json")
    if rc != 0 or doc is None:
        msg, rank = diagnose(out, rc, timeout_s, log)
        raise RunFailed(f"{algo} grid: {msg}", rank=rank, out_dir=out, log=log)
    return doc


# --------------------------------------------------------------------------- CLI (GPU hosts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runners.launch",
                                     description="Run overlapscope runner variants through torchrun.")
    parser.add_argument("algo", choices=sorted(ALGORITHMS))
    parser.add_argument("--variants", default="all", help="comma-separated variants, or all")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--profiler", choices=("torch", "nsys", "none"), default="torch")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a parameter (repeat)")
    parser.add_argument("--no-nsys-rep", action="store_true", help="keep only the .sqlite exports")
    parser.add_argument("--overwrite", action="store_true", help="replace a run already in --out")
    args = parser.parse_args(argv)
    spec = spec_of(args.algo)
    variants = list(spec.variants) if args.variants == "all" else args.variants.split(",")
    if args.overwrite:
        clear_run(args.out, variants)
    params: dict[str, ParamValue] = {}
    for item in args.set:
        name, _, value = item.partition("=")
        params[name] = value

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        results = sweep(args.algo, variants, nproc=args.nproc, profiler=args.profiler, out=args.out,
                        params=params, timeout_s=args.timeout, on_progress=progress,
                        keep_nsys_rep=not args.no_nsys_rep)
    except OutputExists as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RunFailed as exc:
        print(f"run failed: {exc}", file=sys.stderr)
        return 4
    print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
