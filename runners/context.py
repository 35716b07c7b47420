"""Who this rank is: the process group, its parameters, its output folder and its status file.

Built once per rank process by init() from the module's command line (torchrun sets RANK,
WORLD_SIZE, LOCAL_RANK). The status file is what lets the launcher name a hung or failed
rank after torchrun has torn everything down.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from analyzers.io.atomic_write import atomic_path
from runners.specs import AlgorithmSpec, ParamValue

PREFIX = "[overlapscope]"

DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class PeerError(RuntimeError):
    """Raised by healthy ranks when another rank reported a failure (the launcher names that one)."""


@dataclass
class Ctx:
    """Everything a workload needs to know about this rank."""

    spec: AlgorithmSpec
    params: dict[str, ParamValue]
    rank: int
    world: int
    local_rank: int
    device: torch.device
    backend: str
    dtype: torch.dtype
    out: Path
    profiler: str
    group: dist.ProcessGroup
    host_group: dist.ProcessGroup  # gloo: barriers that put no kernel and no CUDA sync in a trace
    status: StatusFile
    notes: list[str] = field(default_factory=list)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def log(self, msg: str, all_ranks: bool = False) -> None:
        if all_ranks or self.rank == 0:
            print(f"{PREFIX} rank {self.rank}: {msg}", flush=True)


class StatusFile:
    """rank{R}.status.json: the phase this rank is in, so a hang can be pinned on a rank."""

    def __init__(self, out: Path, rank: int, params: dict[str, ParamValue]) -> None:
        self.path = out / f"rank{rank}.status.json"
        self.rank = rank
        self.counter = 0
        self.phase = "start"
        self.variant = ""
        self.params = params

    def set(self, phase: str, variant: str = "") -> None:
        # hooks first: a rank that hangs or fails "at" a phase never reports reaching it
        self._test_hooks(phase)
        self.counter += 1
        self.phase, self.variant = phase, variant
        with atomic_path(self.path) as tmp:
            tmp.write_text(json.dumps({"rank": self.rank, "phase": phase, "variant": variant,
                                       "progress": self.counter, "time": time.time(), "pid": os.getpid()}))

    def _test_hooks(self, phase: str) -> None:
        p = self.params
        if p.get("fail_rank") == self.rank and p.get("fail_phase") == phase:
            raise RuntimeError(f"injected failure (test hook --fail-rank {self.rank} --fail-phase {phase})")
        if p.get("kill_rank") == self.rank and p.get("kill_phase") == phase:
            # injected death (test hook): as the OOM killer or a node failure would, no chance to clean up
            os.kill(os.getpid(), signal.SIGKILL)
        if p.get("abort_rank") == self.rank and p.get("abort_phase") == phase:
            os.abort()  # injected C++-style abort (test hook), e.g. gloo throwing on a closed socket at teardown
        if p.get("hang_rank") == self.rank and p.get("hang_phase") == phase:
            while True:  # injected hang (test hook): the launcher's timeout must end it
                time.sleep(3600)


def parse_args(spec: AlgorithmSpec, argv: Sequence[str] | None) -> tuple[argparse.Namespace, dict[str, ParamValue]]:
    parser = argparse.ArgumentParser(prog=f"python -m {spec.module}", description=spec.summary)
    parser.add_argument("--variant", required=True,
                        help=f"comma-separated list of: {', '.join(spec.variants)} (or 'all')")
    parser.add_argument("--profiler", choices=("torch", "nsys", "none"), default="torch")
    parser.add_argument("--out", required=True, type=Path)
    for p in spec.params:
        parser.add_argument(p.flag, dest=p.name, default=None, help=p.help)
    args = parser.parse_args(argv)
    given = {p.name: getattr(args, p.name) for p in spec.params if getattr(args, p.name) is not None}
    return args, spec.coerce(given)


def _pick_backend(requested: str) -> str:
    if requested != "auto":
        return requested
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if torch.cuda.is_available() and torch.cuda.device_count() >= local_world:
        return "nccl"
    return "gloo"


def init(spec: AlgorithmSpec, argv: Sequence[str] | None) -> tuple[Ctx, list[str]]:
    args, given = parse_args(spec, argv)
    if "RANK" not in os.environ:
        raise SystemExit(f"{PREFIX} start this module with torchrun: python -m torch.distributed.run "
                         f"--nproc-per-node N -m {spec.module} ...")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    backend = _pick_backend(str(given.get("backend", "auto")))
    cuda = backend == "nccl"
    params = {**spec.defaults(cuda), **given, "backend": backend}
    status = StatusFile(out, rank, params)
    status.set("init")
    if int(params.get("nccl_max_ctas", 0) or 0) > 0:  # must precede NCCL communicator creation
        os.environ["NCCL_MAX_CTAS"] = str(params["nccl_max_ctas"])
    if cuda:
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} GPUs visible")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, timeout=timedelta(seconds=float(params["pg_timeout_s"])),
                            device_id=device if cuda else None)
    dtype_name = str(params["dtype"])
    if dtype_name == "auto":
        dtype_name = "bf16" if cuda else "fp32"
        params["dtype"] = dtype_name
    variants = list(spec.variants) if args.variant == "all" else [v.strip() for v in args.variant.split(",")]
    for v in variants:
        if v not in spec.variants:
            raise SystemExit(f"{PREFIX} {spec.name}: unknown variant {v!r} (known: {', '.join(spec.variants)})")
    if args.profiler == "nsys" and not cuda:
        raise RuntimeError("--profiler nsys needs GPUs (NCCL backend)")
    torch.manual_seed(int(params["seed"]) + rank)
    host_group = dist.new_group(backend="gloo") if cuda else dist.group.WORLD
    ctx = Ctx(spec=spec, params=params, rank=rank, world=world, local_rank=local_rank, device=device,
              backend=backend, dtype=DTYPES[dtype_name], out=out, profiler=args.profiler,
              group=dist.group.WORLD, host_group=host_group, status=status)
    return ctx, variants
