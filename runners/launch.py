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
import glob
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runners.specs import ALGORITHMS, AlgorithmSpec, ParamValue

__all__ = ["ALGORITHMS", "AlgorithmSpec", "OutputExists", "RunFailed", "RunResult", "Timings", "build_command",
           "chunk_spread_ms", "clear_run", "find_nsys", "run", "run_files", "sweep", "workload_groups"]

PREFIX = "[overlapscope]"
REPO_ROOT = Path(__file__).resolve().parent.parent
KILL_GRACE_S = 10.0
NSYS_TRACE = "cuda,nvtx"
NSYS_CANDIDATES = (
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
    "/usr/local/cuda/bin/nsys",
    "/usr/local/cuda-*/bin/nsys",
)

ProgressFn = Callable[[str], None]


class OutputExists(FileExistsError):
    """The output folder already holds a run: a new one would overwrite or mix with it."""

    def __init__(self, out: Path, found: list[Path]) -> None:
        self.out = out
        self.found = found
        shown = ", ".join(p.relative_to(out).as_posix() for p in found[:3]) + (", ..." if len(found) > 3 else "")
        super().__init__(f"{out} already holds a run ({shown}); choose another folder or pass --overwrite")


class RunFailed(RuntimeError):
    """A run did not complete; the message names the failing (or hanging) rank. Outputs are kept."""

    def __init__(self, message: str, *, rank: int | None, out_dir: Path, log: Path | None) -> None:
        super().__init__(message)
        self.rank = rank
        self.out_dir = out_dir
        self.log = log


@dataclass
class Timings:
    """Medians in ms; each is the slowest rank's median (a step waits for the slowest rank).

    The *_spread_ms fields say how far that median moved within the run: half the range of
    the medians of its timing chunks (the harness times each kind in chunks of a few
    iterations, alternating with the other kinds, so each chunk is a repeat taken at
    another moment and temperature). NaN where the manifest holds no samples.
    """

    variant_ms: float
    compute_ms: float
    comm_ms: float
    baseline_ms: float
    variant_spread_ms: float = float("nan")
    compute_spread_ms: float = float("nan")
    comm_spread_ms: float = float("nan")
    baseline_spread_ms: float = float("nan")


DEFAULT_TIMING_CHUNK = 5  # runners/harness.py TIMING_CHUNK, for manifests that do not record it


def chunk_spread_ms(samples: Sequence[float], chunk: int) -> float:
    """Half the range of the medians of consecutive chunks of `chunk` samples (NaN if < 2 chunks)."""
    medians = [statistics.median(samples[i:i + chunk]) for i in range(0, len(samples), chunk)
               if len(samples[i:i + chunk]) == chunk]
    return (max(medians) - min(medians)) / 2 if len(medians) >= 2 else float("nan")


def _spread(manifest: dict[str, Any], kind: str) -> float:
    """Spread of the reported median of `kind`: that of the slowest rank, the one reported."""
    ranks = [r for r in manifest.get("ranks", []) if kind in r.get("timings_ms", {})]
    if not ranks:
        return float("nan")
    slowest = max(ranks, key=lambda r: r["timings_ms"][kind]["median"])
    samples = slowest["timings_ms"][kind].get("samples") or []
    return chunk_spread_ms(samples, int(manifest.get("timing_chunk", DEFAULT_TIMING_CHUNK)))


def workload_groups(algo: str, variants: Sequence[str], baseline: str | None = None
                    ) -> list[tuple[str, str, list[str]]]:
    """(workload, its baseline, its variants) in the order given: only like is compared with like.

    Each group's baseline is `baseline` where it belongs to that group, else the group's
    variant named "baseline", else its first variant.
    """
    spec = _spec(algo)
    groups: dict[str, list[str]] = {}
    for v in variants:
        groups.setdefault(spec.workload_of(v), []).append(v)
    out = []
    for name, members in groups.items():
        base = baseline if baseline in members else ("baseline" if "baseline" in members else members[0])
        out.append((name, base, members))
    return out


@dataclass
class RunResult:
    algo: str
    variant: str
    out_dir: Path
    manifest: dict[str, Any]
    traces: dict[int, Path]
    timings: Timings
    log: Path | None = None
    wall_s: float = 0.0
    command: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- commands


def find_nsys() -> str | None:
    """nsys from $NSYS, PATH, or the usual install folders."""
    env = os.environ.get("NSYS")
    if env and Path(env).is_file():
        return env
    on_path = shutil.which("nsys")
    if on_path:
        return on_path
    for pattern in NSYS_CANDIDATES:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


def _spec(algo: str) -> AlgorithmSpec:
    if algo not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algo!r} (known: {', '.join(ALGORITHMS)})")
    return ALGORITHMS[algo]


def build_command(algo: str, variants: Sequence[str], *, nproc: int, profiler: str, out: Path,
                  params: dict[str, Any], nsys: str | None = None, python: str | None = None) -> list[str]:
    """The torchrun command line for these variants (one process per GPU, one host)."""
    spec = _spec(algo)
    for v in variants:
        if v not in spec.variants:
            raise ValueError(f"{algo}: unknown variant {v!r} (known: {', '.join(spec.variants)})")
    if profiler not in ("torch", "nsys", "none"):
        raise ValueError(f"profiler must be torch, nsys or none, not {profiler!r}")
    if nproc < 1:
        raise ValueError("nproc must be >= 1")
    values = spec.coerce(params)
    py = python or sys.executable
    cmd = [py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
    module_args = ["--variant", ",".join(variants), "--profiler", profiler, "--out", str(out)]
    for name, value in values.items():
        module_args += [spec.param(name).flag, str(value)]
    if profiler == "nsys":
        if nsys is None:
            raise ValueError("profiler nsys: nsys not found (set $NSYS or put nsys on PATH)")
        cmd += ["--no-python", nsys, "profile", "-t", NSYS_TRACE, "-s", "none", "--cpuctxsw=none",
                "--capture-range=cudaProfilerApi", "--capture-range-end=stop", "-f", "true",
                "-o", str(out / "rank%q{RANK}"), py, "-m", spec.module, *module_args]
    else:
        cmd += ["-m", spec.module, *module_args]
    return cmd


# --------------------------------------------------------------------------- process control


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the whole process group (torchrun and every rank), SIGKILL what is left."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            # the leader is gone; make sure no rank outlives it
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return
        except subprocess.TimeoutExpired:
            continue


def _execute(cmd: list[str], out: Path, timeout_s: float, on_progress: ProgressFn | None,
             env: dict[str, str]) -> tuple[int | None, Path, float]:
    """Run cmd in its own session; returns (exit code or None on timeout, log path, wall seconds)."""
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "launch.log"
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                cwd=str(REPO_ROOT), start_new_session=True)

        def pump() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                log.write(raw)
                log.flush()
                line = raw.decode(errors="replace").rstrip()
                if on_progress is not None and PREFIX in line:
                    on_progress(line[line.index(PREFIX) + len(PREFIX):].strip())

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            rc: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = None
            if on_progress is not None:
                on_progress(f"timeout after {timeout_s:.0f} s: stopping all ranks")
            _kill_group(proc)
        else:
            try:  # children of a clean exit are gone; after a failure torchrun already stopped them
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        reader.join(timeout=10)
    return rc, log_path, time.monotonic() - t0


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _diagnose(out: Path, rc: int | None, timeout_s: float, log: Path) -> tuple[str, int | None]:
    """Name the rank that failed (earliest error file) or hung (least progress)."""
    errors = [e for p in sorted(out.glob("rank*.error.json")) if (e := _read_json(p))]
    statuses = [s for p in sorted(out.glob("rank*.status.json")) if (s := _read_json(p))]
    if rc is None:
        if errors:
            first = min(errors, key=lambda e: e["time"])
            return (f"run timed out after {timeout_s:.0f} s; rank {first['rank']} had failed in phase "
                    f"{first['phase']!r}: {first['type']}: {first['message']}", int(first["rank"]))
        if not statuses:
            return f"run timed out after {timeout_s:.0f} s before any rank started (see {log})", None
        least = min(s["progress"] for s in statuses)
        laggards = [s for s in statuses if s["progress"] == least]
        others = [s for s in statuses if s["progress"] != least]
        names = ", ".join(f"rank {s['rank']} (phase {s['phase']!r}{', ' + s['variant'] if s['variant'] else ''})"
                          for s in laggards)
        detail = "; ".join(f"rank {s['rank']} waiting in {s['phase']!r}" for s in others)
        rank = int(laggards[0]["rank"]) if len(laggards) == 1 else None
        return (f"run timed out after {timeout_s:.0f} s: {names} hung" + (f" ({detail})" if detail else ""),
                rank)
    text = log.read_text(errors="replace") if log.exists() else ""
    killed = _killed_rank(text)
    if killed is not None and not any(int(e["rank"]) == killed[0] for e in errors):
        # a rank killed by a signal (OOM killer, node failure) leaves no error file; the others then fail
        # on broken connections, so their error files name a symptom, not the cause
        krank, signame = killed
        last = next((s for s in statuses if int(s["rank"]) == krank), None)
        where = f" after phase {last['phase']!r}" if last else ""
        msg = f"rank {krank} was killed by {signame}{where} (no error of its own: out of memory, or killed?)"
        if errors:
            msg += "; then " + ", ".join(f"rank {e['rank']} ({e['type']})" for e in errors)
        return msg, krank
    if errors:
        # a rank that only reports another rank's failure (PeerError) is never the culprit
        primary = [e for e in errors if e.get("type") != "PeerError"] or errors
        first = min(primary, key=lambda e: e["time"])
        later = [e for e in errors if e is not first]
        msg = (f"rank {first['rank']} failed in phase {first['phase']!r}"
               + (f" (variant {first['variant']})" if first.get("variant") else "")
               + f": {first['type']}: {first['message']}")
        if later:
            msg += "; then " + ", ".join(f"rank {e['rank']} ({e['type']})" for e in later)
        return msg, int(first["rank"])
    # no error file: a crash or a failure before the runner started
    rank = _rank_from_torchrun_log(text)
    tail = "\n".join(text.strip().splitlines()[-15:])
    who = f"rank {rank}" if rank is not None else "a rank"
    return f"{who} exited with an error (torchrun exit code {rc}); last lines of {log}:\n{tail}", rank


def _teardown_crash(out: Path, variants: list[str], nproc: int, log: Path) -> str | None:
    """A warning when the run failed only in process-group teardown, else None.

    That is: every rank reported phase 'finished' or 'exit' (its outputs written and every rank past
    the final barrier), no rank wrote an error file, and every variant's manifest is there. The
    measurements are complete; the crash (gloo throwing on a peer's closed socket) is named, not
    hidden: it goes into each manifest as launch_warning.
    """
    statuses = [s for p in sorted(out.glob("rank*.status.json")) if (s := _read_json(p))]
    if (len(statuses) != nproc or any(s.get("phase") not in ("finished", "exit") for s in statuses)
            or any(out.glob("rank*.error.json"))):
        return None
    if not all(((out if len(variants) == 1 else out / v) / "manifest.json").is_file() for v in variants):
        return None
    killed = _killed_rank(log.read_text(errors="replace") if log.exists() else "")
    who = f"rank {killed[0]} ended with {killed[1]}" if killed else "a rank exited with an error"
    return (f"{who} in process-group teardown, after every rank had finished and written its outputs; "
            "the measurements are complete")


def _killed_rank(text: str) -> tuple[int, str] | None:
    """(rank, signal name) when torchrun's root cause is a rank that died of a signal (negative exit code)."""
    root = text.rfind("Root Cause")
    if root < 0:
        return None
    rank = _rank_from_torchrun_log(text[root:])
    for line in text[root:].splitlines():
        stripped = line.strip()
        if stripped.startswith("exitcode") and ":" in stripped:
            value = stripped.split(":", 1)[1].split()[0]
            if rank is not None and value.lstrip("-").isdigit() and int(value) < 0:
                name = stripped[stripped.rfind("(") + 1:stripped.rfind(")")] if stripped.endswith(")") else ""
                return rank, name if name.startswith("SIG") else f"signal {-int(value)}"
            return None
    return None


def _rank_from_torchrun_log(text: str) -> int | None:
    """torchrun's failure summary names the root-cause rank as 'rank : N (local_rank: M)'."""
    root = text.rfind("Root Cause")
    text = text[root:] if root >= 0 else text
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("rank") and "(local_rank:" in stripped and ":" in stripped:
            try:
                return int(stripped.split(":", 1)[1].split("(")[0].strip())
            except ValueError:
                continue
    return None


# --------------------------------------------------------------------------- results


def _result(algo: str, variant: str, out_dir: Path, log: Path | None, wall: float,
            cmd: list[str], extra: dict[str, Any]) -> RunResult:
    manifest_path = out_dir / "manifest.json"
    manifest = _read_json(manifest_path)
    if manifest is None:
        raise RunFailed(f"{algo} {variant}: run ended without {manifest_path}", rank=0, out_dir=out_dir, log=log)
    manifest.setdefault("launch", {}).update({"command": cmd, "wall_s": round(wall, 2), **extra})
    traces: dict[int, Path] = {}
    for rank, name in manifest.get("traces", {}).items():
        traces[int(rank)] = out_dir / name
    manifest_path.write_text(json.dumps(manifest, indent=1, default=str))
    t = manifest["timings_ms"]
    timings = Timings(variant_ms=t["variant_ms"], compute_ms=t["compute_alone_ms"], comm_ms=t["comm_alone_ms"],
                      baseline_ms=t["baseline_ms"], variant_spread_ms=_spread(manifest, "variant"),
                      compute_spread_ms=_spread(manifest, "compute_alone"),
                      comm_spread_ms=_spread(manifest, "comm_alone"), baseline_spread_ms=_spread(manifest, "baseline"))
    return RunResult(algo=algo, variant=variant, out_dir=out_dir, manifest=manifest, traces=traces,
                     timings=timings, log=log, wall_s=wall, command=cmd)


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


def _export_nsys(nsys: str, out: Path, keep_rep: bool, env: dict[str, str]) -> dict[int, Path]:
    """Turn each rank{R}.nsys-rep into rank{R}.sqlite with the user's own nsys."""
    reps = sorted(out.glob("rank*.nsys-rep"))
    if not reps:
        leftovers = sorted(p.name for p in out.glob("rank*.qdstrm"))
        hint = (f" (only {', '.join(leftovers)}: nsys could not import its raw data; on hosts without "
                "libdw.so.1/libelf.so.1 put them on LD_LIBRARY_PATH)") if leftovers else ""
        raise RunFailed(f"nsys wrote no .nsys-rep in {out}{hint}", rank=None, out_dir=out, log=None)
    traces: dict[int, Path] = {}
    for rep in reps:
        sqlite = rep.with_suffix(".sqlite")
        done = subprocess.run([nsys, "export", "--type", "sqlite", "--force-overwrite", "true",
                               "--output", str(sqlite), str(rep)], capture_output=True, text=True, env=env)
        if done.returncode != 0 or not sqlite.exists():
            raise RunFailed(f"nsys export failed for {rep}: {done.stderr.strip()[-500:]}", rank=None,
                            out_dir=out, log=None)
        traces[int(rep.stem.removeprefix("rank"))] = sqlite
        if not keep_rep:
            rep.unlink()
    return traces


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
    env = _env()
    extra: dict[str, Any] = {"git_commit": _git_commit(), "runners_digest": runners_digest()}
    if nsys:
        extra["nsys"] = nsys
        extra["nsys_version"] = env["OVERLAPSCOPE_NSYS_VERSION"] = _nsys_version(nsys)
    if on_progress:
        on_progress(f"{algo} {','.join(variants)}: {nproc} processes, profiler {profiler}, out {out}")
    rc, log, wall = _execute(cmd, out, timeout_s, on_progress, env)
    warning = _teardown_crash(out, variants, nproc, log) if rc not in (0, None) else None
    if warning and on_progress:
        on_progress(f"warning: {warning}")
    if rc != 0 and not warning:
        msg, rank = _diagnose(out, rc, timeout_s, log)
        _write_failed_manifest(out, algo, variants, cmd, params, msg, rank, profiler)
        raise RunFailed(f"{algo} {','.join(variants)}: {msg}", rank=rank, out_dir=out, log=log)
    results = []
    for v in variants:
        vdir = out if len(variants) == 1 else out / v
        res = _result(algo, v, vdir, log, wall, cmd, extra)
        if warning:
            res.manifest["launch_warning"] = warning
            (vdir / "manifest.json").write_text(json.dumps(res.manifest, indent=1, default=str))
        if nsys:
            res.traces = _export_nsys(nsys, vdir, keep_nsys_rep, env)
            res.manifest["traces"] = {str(r): p.name for r, p in res.traces.items()}
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
    variants = list(variants) or list(_spec(algo).variants)
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


# --------------------------------------------------------------------------- CLI (GPU hosts)


def format_table(results: dict[str, RunResult]) -> str:
    rows = [("variant", "time_ms", "±", "baseline_ms", "compute_ms", "±", "comm_ms", "max_rel_err")]
    for v, r in results.items():
        err = max(x["rel_error"] for x in r.manifest["ranks"])
        t = r.timings
        rows.append((v, f"{t.variant_ms:.3f}", f"{t.variant_spread_ms:.3f}", f"{t.baseline_ms:.3f}",
                     f"{t.compute_ms:.3f}", f"{t.compute_spread_ms:.3f}", f"{t.comm_ms:.3f}", f"{err:.2g}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)


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
    spec = _spec(args.algo)
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
