"""What every runner rank does, whatever the algorithm.

One rank process (started by torchrun) runs: init of the process group, the
workload's setup, then for each requested variant: warm-up, a correctness check
against the non-overlapped baseline (the run fails above a dtype bound),
CUDA-event timings (median of many) of the variant, the baseline, the compute
alone and the communication alone, and a profile of a few iterations
(torch.profiler with CUDA sync events, or NVTX ranges + cudaProfilerStart/Stop
for Nsight Systems). Rank 0 writes manifest.json; every rank writes its trace.

Failure handling is file based so that the launcher can name the guilty rank
after torchrun tore everything down: each rank keeps rank{R}.status.json (its
current phase and a progress counter) and, when it raises, rank{R}.error.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import socket
import statistics
import sys
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from runners.specs import AlgorithmSpec, ParamValue

PREFIX = "[overlapscope]"
TIMING_CHUNK = 5  # iterations per timing chunk; kinds alternate between chunks
MANIFEST_VERSION = 1

# Relative-error bounds (Frobenius norm) per dtype: a few units of the dtype's rounding
# error, so different summation orders pass and a wrong block (error ~1) fails.
REL_ERROR_BOUND: dict[torch.dtype, float] = {
    torch.bfloat16: 2e-2,
    torch.float16: 5e-3,
    torch.float32: 1e-4,
}

DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

# Environment variables worth recording: they change what the traces show.
ENV_PREFIXES = ("NCCL_", "TORCH_SYMM_MEM", "TORCH_NCCL", "CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_VISIBLE_DEVICES",
                "OMP_NUM_THREADS")


class CorrectnessError(RuntimeError):
    """A variant's output differs from the non-overlapped baseline beyond the dtype bound."""


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
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"rank": self.rank, "phase": phase, "variant": variant,
                                   "progress": self.counter, "time": time.time(), "pid": os.getpid()}))
        tmp.replace(self.path)

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


# --------------------------------------------------------------------------- streams


class Streams:
    """Worker streams on CUDA; on CPU the same calls are no-ops, so schedules run unchanged."""

    def __init__(self, ctx: Ctx, n: int, priority: int = 0) -> None:
        self.cuda = ctx.cuda
        self.streams: list[torch.cuda.Stream | None] = (
            [torch.cuda.Stream(device=ctx.device, priority=priority) for _ in range(n)] if self.cuda else [None] * n
        )

    def __len__(self) -> int:
        return len(self.streams)

    def on(self, i: int) -> contextlib.AbstractContextManager[Any]:
        s = self.streams[i % len(self.streams)]
        return torch.cuda.stream(s) if s is not None else contextlib.nullcontext()

    def wait_main(self, i: int) -> None:
        """Worker i waits for everything issued so far on the current (main) stream (a fork)."""
        s = self.streams[i % len(self.streams)]
        if s is not None:
            s.wait_stream(torch.cuda.current_stream())

    def main_waits(self, i: int) -> None:
        """The current (main) stream waits for worker i (a join)."""
        s = self.streams[i % len(self.streams)]
        if s is not None:
            torch.cuda.current_stream().wait_stream(s)

    def join_all(self) -> None:
        for i in range(len(self.streams)):
            self.main_waits(i)

    def host_sync(self, i: int) -> None:
        """Block the host until worker i is idle (the anti-pattern host-sync shows)."""
        s = self.streams[i % len(self.streams)]
        if s is not None:
            s.synchronize()


class Marker:
    """Event on CUDA, nothing on CPU (work there is already complete when the call returns)."""

    def __init__(self, ctx: Ctx) -> None:
        self.event = torch.cuda.Event() if ctx.cuda else None

    def record(self) -> None:
        if self.event is not None:
            self.event.record()

    def wait(self) -> None:
        if self.event is not None:
            torch.cuda.current_stream().wait_event(self.event)


_NVTX = False


@contextlib.contextmanager
def region(name: str) -> Iterator[None]:
    """A named range: record_function for torch.profiler, NVTX too under Nsight Systems."""
    if _NVTX:
        torch.cuda.nvtx.range_push(name)
    try:
        with torch.profiler.record_function(name):
            yield
    finally:
        if _NVTX:
            torch.cuda.nvtx.range_pop()


# --------------------------------------------------------------------------- workloads


class Workload(ABC):
    """Base class: an algorithm's buffers and its per-iteration callables.

    Subclasses implement variant_fn (one iteration of a variant; returns the output in
    a canonical layout shared with the baseline), baseline_fn, compute_fn and comm_fn.
    """

    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx

    @abstractmethod
    def variant_fn(self, variant: str) -> Callable[[], Any]:
        ...

    @abstractmethod
    def baseline_fn(self, variant: str) -> Callable[[], Any]:
        """The non-overlapped schedule this variant is checked and compared against."""
        ...

    @abstractmethod
    def compute_fn(self, variant: str) -> Callable[[], Any]:
        ...

    @abstractmethod
    def comm_fn(self, variant: str) -> Callable[[], Any]:
        ...

    def check(self, variant: str) -> float:
        """Relative error of the variant's output against the baseline's."""
        out = self.variant_fn(variant)()
        ref = self.baseline_fn(variant)()
        return rel_error(self.corrupt(out), ref)

    def corrupt(self, out: Any) -> Any:
        """Test hook (--corrupt-rank): a wrong output must fail the check on that rank."""
        if self.ctx.params.get("corrupt_rank") != self.ctx.rank:
            return out
        if isinstance(out, list | tuple):
            return [t + 1 for t in out]
        return out + 1

    def describe(self, variant: str) -> dict[str, Any]:
        """Extra facts for the manifest (shapes, fallbacks taken)."""
        return {}


def rel_error(out: Any, ref: Any) -> float:
    """||out - ref|| / ||ref|| in float64 over all tensors (lists are concatenated)."""
    if isinstance(out, list | tuple):
        out = torch.cat([t.detach().reshape(-1).double() for t in out])
        ref = torch.cat([t.detach().reshape(-1).double() for t in ref])
    out, ref = out.detach().double(), ref.detach().double()
    if out.shape != ref.shape:
        raise CorrectnessError(f"output shape {tuple(out.shape)} != baseline shape {tuple(ref.shape)}")
    denom = torch.linalg.vector_norm(ref).item()
    num = torch.linalg.vector_norm(out - ref).item()
    return num / denom if denom > 0 else num


# --------------------------------------------------------------------------- timing


def synchronize(ctx: Ctx) -> None:
    if ctx.cuda:
        torch.cuda.synchronize(ctx.device)


def time_ms(ctx: Ctx, fn: Callable[[], Any], iters: int) -> list[float]:
    """Per-iteration times in ms: CUDA events on the current stream, back to back.

    Every callable joins its worker streams into the current stream before it
    returns, so an end event covers all of the iteration's GPU work.
    """
    dist.barrier(group=ctx.group)
    synchronize(ctx)
    if ctx.cuda:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        for i in range(iters):
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize(ctx.device)
        return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def time_interleaved(ctx: Ctx, fns: dict[str, Callable[[], Any]], iters: int,
                     chunk: int = TIMING_CHUNK) -> dict[str, list[float]]:
    """Time several callables in alternating chunks of iterations.

    GPUs slow down as they heat up under sustained GEMMs, so whatever is timed last
    looks slower; alternating small chunks gives every callable the same conditions.
    """
    for f in fns.values():  # one untimed call each (allocator, cuBLAS heuristics)
        f()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    done = 0
    while done < iters:
        n = min(chunk, iters - done)
        for k, f in fns.items():
            samples[k] += time_ms(ctx, f, n)
        done += n
    return samples


def _stats(samples: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples), "n": len(samples)}


# --------------------------------------------------------------------------- profiling


def profile(ctx: Ctx, fn: Callable[[], Any], out_dir: Path) -> str | None:
    """Profile 1 warm-up + profile_steps iterations; returns the trace file name (torch mode)."""
    steps = int(ctx.params["profile_steps"])
    if ctx.profiler == "none" or steps <= 0:
        return None
    dist.barrier(group=ctx.group)
    synchronize(ctx)
    if ctx.profiler == "nsys":
        fn()  # the warm-up step, outside the capture range
        synchronize(ctx)  # nothing in flight when the capture starts
        dist.barrier(group=ctx.host_group)
        torch.cuda.profiler.start()
        dist.barrier(group=ctx.host_group)  # capture start can take a while on one rank: start steps together
        for i in range(steps):
            torch.cuda.nvtx.range_push(f"ProfilerStep#{i + 1}")
            fn()
            torch.cuda.nvtx.range_pop()
        synchronize(ctx)
        torch.cuda.profiler.stop()
        return None
    name = f"rank{ctx.rank}.json.gz"
    activities = [torch.profiler.ProfilerActivity.CPU]
    if ctx.cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    config = torch.profiler._ExperimentalConfig(enable_cuda_sync_events=True)
    with torch.profiler.profile(
        activities=activities,
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=steps, repeat=1),
        experimental_config=config,
        on_trace_ready=lambda p: p.export_chrome_trace(str(out_dir / name)),
    ) as prof:
        fn()  # the profiler's warm-up step (not recorded)
        synchronize(ctx)  # still in warm-up: no kernel of this step may leak into the recording
        dist.barrier(group=ctx.host_group)
        prof.step()  # -> recording; this transition can take a while (seen: 1 s) on one rank only
        dist.barrier(group=ctx.host_group)  # so all ranks start ProfilerStep#1 together (no GPU sync)
        for _ in range(steps):
            fn()
            prof.step()
    synchronize(ctx)
    return name


# --------------------------------------------------------------------------- setup


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
    global _NVTX
    _NVTX = args.profiler == "nsys"
    if args.profiler == "nsys" and not cuda:
        raise RuntimeError("--profiler nsys needs GPUs (NCCL backend)")
    torch.manual_seed(int(params["seed"]) + rank)
    host_group = dist.new_group(backend="gloo") if cuda else dist.group.WORLD
    ctx = Ctx(spec=spec, params=params, rank=rank, world=world, local_rank=local_rank, device=device,
              backend=backend, dtype=DTYPES[dtype_name], out=out, profiler=args.profiler,
              group=dist.group.WORLD, host_group=host_group, status=status)
    return ctx, variants


def _versions(ctx: Ctx) -> dict[str, Any]:
    v: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(),
                         "cuda": torch.version.cuda}
    if ctx.cuda:
        with contextlib.suppress(Exception):
            nccl = torch.cuda.nccl.version()
            v["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    if os.environ.get("OVERLAPSCOPE_NSYS_VERSION"):
        v["nsys"] = os.environ["OVERLAPSCOPE_NSYS_VERSION"]
    return v


def _rank_facts(ctx: Ctx) -> dict[str, Any]:
    facts: dict[str, Any] = {"rank": ctx.rank, "local_rank": ctx.local_rank, "host": socket.gethostname(),
                             "pid": os.getpid(), "device": str(ctx.device)}
    if ctx.cuda:
        facts["gpu"] = torch.cuda.get_device_name(ctx.device)
    return facts


# --------------------------------------------------------------------------- one variant


def run_variant(ctx: Ctx, wl: Workload, variant: str, out_dir: Path) -> dict[str, Any]:
    """Warm up, check, time and profile one variant; returns this rank's record."""
    p = ctx.params
    out_dir.mkdir(parents=True, exist_ok=True)
    fn = wl.variant_fn(variant)
    ctx.status.set("warmup", variant)
    for _ in range(int(p["warmup"])):
        fn()
    synchronize(ctx)

    ctx.status.set("check", variant)
    err = wl.check(variant)
    bound = REL_ERROR_BOUND[ctx.dtype]
    errors: list[float] = [0.0] * ctx.world
    dist.all_gather_object(errors, err, group=ctx.group)
    bad = [(r, e) for r, e in enumerate(errors) if not e <= bound]
    ctx.log(f"{variant}: relative error vs baseline {max(errors):.3g} (bound {bound:g})")
    if bad:
        worst = ", ".join(f"rank {r}: {e:.3g}" for r, e in bad)
        msg = f"{ctx.spec.name} {variant}: relative error above {bound:g} ({worst})"
        if any(r == ctx.rank for r, _ in bad):
            raise CorrectnessError(msg)
        raise PeerError(msg)

    ctx.status.set("timing", variant)
    timings = time_interleaved(ctx, {"variant": fn, "baseline": wl.baseline_fn(variant),
                                     "compute_alone": wl.compute_fn(variant), "comm_alone": wl.comm_fn(variant)},
                               int(p["iters"]))
    med = {k: statistics.median(v) for k, v in timings.items()}
    ctx.log(f"{variant}: {med['variant']:.3f} ms (baseline {med['baseline']:.3f}, compute alone "
            f"{med['compute_alone']:.3f}, comm alone {med['comm_alone']:.3f})")

    ctx.status.set("profile", variant)
    trace = profile(ctx, fn, out_dir)
    return {**_rank_facts(ctx), "rel_error": err, "trace": trace,
            "timings_ms": {k: {**_stats(v), "samples": [round(x, 5) for x in v]} for k, v in timings.items()}}


def _summary(records: list[dict[str, Any]]) -> dict[str, float]:
    """Run-level figures: per kind, the slowest rank's median (the step waits for it)."""
    kinds = records[0]["timings_ms"].keys()
    return {f"{k}_ms": max(r["timings_ms"][k]["median"] for r in records) for k in kinds}


def write_manifest(ctx: Ctx, wl: Workload, variant: str, out_dir: Path, records: list[dict[str, Any]],
                   argv: Sequence[str]) -> None:
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "tool": "overlapscope runners",
        "status": "ok",
        "algorithm": ctx.spec.name,
        "variant": variant,
        "variant_help": ctx.spec.variants[variant],
        "profiler": ctx.profiler,
        "params": ctx.params,
        "world_size": ctx.world,
        "backend": ctx.backend,
        "dtype": str(ctx.dtype).removeprefix("torch."),
        "command": [sys.executable, "-m", "torch.distributed.run",
                    "--nproc-per-node", os.environ.get("LOCAL_WORLD_SIZE", str(ctx.world)),
                    "-m", ctx.spec.module, *argv],
        "hosts": sorted({r["host"] for r in records}),
        "gpus": [r.get("gpu") for r in records if r.get("gpu")],
        "versions": _versions(ctx),
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
        "rel_error_bound": REL_ERROR_BOUND[ctx.dtype],
        "timings_ms": _summary(records),
        "timing_chunk": TIMING_CHUNK,
        "timing_method": ("CUDA events around each iteration, back to back on the current stream, in chunks of "
                          f"{TIMING_CHUNK} alternating variant/baseline/compute/comm; median of iters per rank, "
                          "then the slowest rank" if ctx.cuda else
                          "host perf_counter per iteration (CPU/gloo: correctness runs, not performance)"),
        "traces": {str(r["rank"]): r["trace"] for r in records if r["trace"]},
        "workload": wl.describe(variant),
        "notes": ctx.notes,
        "ranks": records,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1, default=str))


def _write_error(out: Path, rank: int, status: StatusFile | None, exc: BaseException) -> None:
    err = {"rank": rank, "phase": status.phase if status else "start", "variant": status.variant if status else "",
           "type": type(exc).__name__, "message": str(exc), "time": time.time(),
           "traceback": traceback.format_exc()}
    with contextlib.suppress(OSError):
        out.mkdir(parents=True, exist_ok=True)
        (out / f"rank{rank}.error.json").write_text(json.dumps(err, indent=1))


def _all_past_the_barrier(ctx: Ctx, timeout_s: float = 60.0) -> None:
    """Wait, through the rendezvous store, until every rank has returned from the final barrier.

    A gloo barrier can return on one rank while a peer is still reading its last message; the first
    rank then tears its sockets down and the peer's gloo thread throws on the closed connection,
    which aborts the process (a rare SIGABRT "after phase 'done'" seen in CI on 3-rank CPU runs).
    The store is served by torchrun's agent, so it outlives every rank's sockets. Best effort: a
    store that cannot be reached (not under torchrun) or a peer that never comes ends the wait.
    """
    try:
        store = dist.distributed_c10d._get_default_store()
        key = "overlapscope/past-final-barrier"
        store.add(key, 1)
        deadline = time.monotonic() + timeout_s
        while store.add(key, 0) < ctx.world and time.monotonic() < deadline:
            time.sleep(0.005)
    except (AttributeError, RuntimeError, ValueError):
        pass


def main(spec: AlgorithmSpec, build: Callable[[Ctx, list[str]], Workload],
         argv: Sequence[str] | None = None) -> None:
    """Entry point of a runner module (one rank)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    rank = int(os.environ.get("RANK", "0"))
    out_guess = Path(argv[argv.index("--out") + 1]) if "--out" in argv[:-1] else Path(".")
    ctx: Ctx | None = None
    try:
        ctx, variants = init(spec, argv)
        ctx.status.set("setup")
        wl = build(ctx, variants)
        for variant in variants:
            out_dir = ctx.out if len(variants) == 1 else ctx.out / variant
            record = run_variant(ctx, wl, variant, out_dir)
            records: list[Any] = [None] * ctx.world
            dist.all_gather_object(records, record, group=ctx.group)
            if ctx.rank == 0:
                write_manifest(ctx, wl, variant, out_dir, records, argv)
        ctx.status.set("done")
        dist.barrier(group=ctx.group)
        _all_past_the_barrier(ctx)
        ctx.status.set("finished")
        dist.destroy_process_group()
        ctx.status.set("exit")
    except BaseException as exc:
        if not isinstance(exc, SystemExit | KeyboardInterrupt):
            _write_error(ctx.out if ctx else out_guess, rank, ctx.status if ctx else None, exc)
            print(f"{PREFIX} rank {rank} FAILED in phase "
                  f"{ctx.status.phase if ctx else 'start'}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        raise
