"""Command lines: the torchrun command that starts the ranks, and the one a user types to run it again.

build_command is what the launcher executes; user_command is what manifests, the app's Run
page and the docs show: `overlapscope run`/`sweep` with only the parameters that differ from
the defaults (the test hooks appear only when set).
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runners.specs import ALGORITHMS, COMMON, AlgorithmSpec

NSYS_TRACE = "cuda,nvtx"
NSYS_CANDIDATES = (
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
    "/usr/local/cuda/bin/nsys",
    "/usr/local/cuda-*/bin/nsys",
)


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


def spec_of(algo: str) -> AlgorithmSpec:
    if algo not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algo!r} (known: {', '.join(ALGORITHMS)})")
    return ALGORITHMS[algo]


def build_command(algo: str, variants: Sequence[str], *, nproc: int, profiler: str, out: Path,
                  params: dict[str, Any], nsys: str | None = None, python: str | None = None) -> list[str]:
    """The torchrun command line for these variants (one process per GPU, one host)."""
    spec = spec_of(algo)
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


def _is_default(spec: AlgorithmSpec, name: str, value: Any, cuda: bool) -> bool:
    """True when `value` is what the run would take anyway (auto-resolved dtype/backend included)."""
    if value == spec.param(name).default_for(cuda):
        return True
    if name == "backend":
        return value == ("nccl" if cuda else "gloo")
    if name == "dtype":
        return value == ("bf16" if cuda else "fp32")
    return False


def non_default_params(algo: str, params: dict[str, Any], *, cuda: bool) -> dict[str, Any]:
    """The parameters that differ from the algorithm's defaults on this kind of host, in spec order.

    For an algorithm this version does not know (a manifest from elsewhere), only the parameters
    every algorithm shares (COMMON: the test hooks among them) can be told apart from defaults.
    """
    if algo not in ALGORITHMS:
        common = {p.name: p for p in COMMON}
        return {k: v for k, v in params.items()
                if k not in common or str(v).lower() != str(common[k].default_for(cuda)).lower()}
    spec = spec_of(algo)
    values = spec.coerce({k: v for k, v in params.items() if k.replace("-", "_") in spec.param_names
                          or k.lower() in (n.lower() for n in spec.param_names)})
    return {p.name: values[p.name] for p in spec.params
            if p.name in values and not _is_default(spec, p.name, values[p.name], cuda)}


def user_command(algo: str, variants: Sequence[str], params: dict[str, Any], *, nproc: int = 2,
                 profiler: str = "torch", out: str | Path | None = None, cuda: bool = True) -> list[str]:
    """`overlapscope run ALGO --variant V ...` (or `sweep ... --variants A,B`) as a user types it.

    Only options and NAME=VALUE parameters that differ from their defaults appear, so the test
    hooks (fail_rank, hang_phase, ...) show only where a run set them. `cuda` says whether the
    recorded run had GPUs: the defaults (sizes, dtype, backend) differ between GPU and CPU runs.
    """
    cmd = ["overlapscope"]
    cmd += ["run", algo, "--variant", variants[0]] if len(variants) == 1 else ["sweep", algo, "--variants",
                                                                                ",".join(variants)]
    if nproc != 2:
        cmd += ["--nproc", str(nproc)]
    if profiler != "torch":
        cmd += ["--profiler", profiler]
    if out is not None:
        cmd += ["--out", str(out)]
    for name, value in non_default_params(algo, params, cuda=cuda).items():
        cmd.append(f"{name}={str(value).lower() if isinstance(value, bool) else value}")
    return cmd


def shell_line(cmd: Sequence[str]) -> str:
    """A command list as one line a shell reads back into the same words."""
    return shlex.join(cmd)


GRID_KEYS = ("M", "K", "N", "steps", "dtype")


def read_grid(path: Path, algo: str) -> list[dict[str, Any]]:
    """The shapes of `algo` in a grid file ({"ALGO": [{"M": .., "K": .., "N": .., "steps": .., "dtype": ..}]}),
    each checked against the algorithm's parameter specs; ValueError naming the file and the problem."""
    import json

    spec = spec_of(algo)
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable JSON grid file ({type(exc).__name__})") from None
    shapes = doc.get(algo) if isinstance(doc, dict) else None
    if not isinstance(shapes, list) or not shapes:
        raise ValueError(f"{path}: no list of shapes under {algo!r}")
    out = []
    for i, shape in enumerate(shapes):
        if not isinstance(shape, dict) or set(shape) - set(GRID_KEYS) or not {"M", "K", "N"} <= set(shape):
            raise ValueError(f"{path}: {algo} shape {i + 1}: expected M, K, N (and steps, dtype), got {shape!r}")
        try:
            values = spec.coerce(shape)
        except (KeyError, ValueError) as exc:
            raise ValueError(f"{path}: {algo} shape {i + 1}: {exc.args[0] if exc.args else exc}") from None
        if any(int(values[k]) <= 0 for k in ("M", "K", "N")):
            raise ValueError(f"{path}: {algo} shape {i + 1}: sizes must be positive")
        out.append({"steps": spec.param("steps").default, "dtype": "bf16", **values})
    return out


def grid_command(grid: Path, out: Path, *, algos: Sequence[str], nproc: int, iters: int, retune: bool,
                 python: str | None = None) -> list[str]:
    """The torchrun command of runners.grid (one process group for the whole grid)."""
    return [python or sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
            str(nproc), "-m", "runners.grid", "--grid", str(grid), "--out", str(out), "--algos", ",".join(algos),
            "--iters", str(iters), "--tune", "retune" if retune else "auto"]
