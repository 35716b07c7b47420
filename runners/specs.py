"""What each runner algorithm offers: variants, parameters and their defaults.

This module is pure data and imports no torch, so the CLI can list algorithms,
validate parameters and build torchrun commands on a machine without torch.
The runner modules (runners/ag_gemm.py, ...) build their argument parsers from
the same specs, so the launcher and the ranks can never disagree on a name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ParamValue = int | float | str | bool


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: `default` is for GPUs (NCCL), `cpu_default` for gloo on CPU."""

    name: str
    type: type
    default: ParamValue
    help: str
    cpu_default: ParamValue | None = None
    choices: tuple[str, ...] | None = None

    def default_for(self, cuda: bool) -> ParamValue:
        """The default on GPUs, or the small CPU default (correctness only) without them."""
        if not cuda and self.cpu_default is not None:
            return self.cpu_default
        return self.default

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class AlgorithmSpec:
    """An algorithm: the module torchrun starts, its variants and its parameters."""

    name: str
    module: str
    summary: str
    variants: dict[str, str]
    params: tuple[ParamSpec, ...]
    # variants that need CUDA; the value says what the CPU/gloo fallback runs instead
    cuda_only: dict[str, str] = field(default_factory=dict)
    # what a variant computes: variants are compared (overlap, speed-up) only within one workload
    workload: str = ""
    workloads: dict[str, str] = field(default_factory=dict)  # variants whose workload is not `workload`

    def workload_of(self, variant: str) -> str:
        return self.workloads.get(variant, self.workload or self.name)

    def param(self, name: str) -> ParamSpec:
        for p in self.params:
            if p.name == name:
                return p
        folded = [p for p in self.params if p.name.lower() == name.lower()]  # "m" finds "M"
        if len(folded) == 1:
            return folded[0]
        raise KeyError(f"{self.name}: unknown parameter {name!r} (known: {', '.join(self.param_names)})")

    @property
    def param_names(self) -> list[str]:
        return [p.name for p in self.params]

    def defaults(self, cuda: bool) -> dict[str, ParamValue]:
        return {p.name: p.default_for(cuda) for p in self.params}

    def coerce(self, params: dict[str, Any]) -> dict[str, ParamValue]:
        """Check names and convert values (e.g. strings from a CLI) to each parameter's type."""
        out: dict[str, ParamValue] = {}
        for key, value in params.items():
            spec = self.param(key.replace("-", "_"))
            out[spec.name] = _convert(spec, value)
        return out


def _convert(spec: ParamSpec, value: Any) -> ParamValue:
    if spec.type is bool:
        if isinstance(value, str):
            low = value.strip().lower()
            if low not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(f"parameter {spec.name}: expected a boolean, got {value!r}")
            value = low in ("1", "true", "yes", "on")
        return bool(value)
    try:
        converted = spec.type(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"parameter {spec.name}: expected {spec.type.__name__}, got {value!r}") from exc
    if spec.choices is not None and converted not in spec.choices:
        raise ValueError(f"parameter {spec.name}: {converted!r} is not one of {', '.join(spec.choices)}")
    return converted


# Where a rank reports itself (runners/context.py, StatusFile.set), in order: the test hooks act there.
# done: this rank's outputs are written; finished: every rank passed the final barrier (only the
# process-group teardown is left: a crash there loses nothing, runners.launch reports it as a
# warning); exit: the process group is destroyed
PHASES = ("init", "setup", "tune", "warmup", "check", "timing", "profile", "done", "finished", "exit")

# Parameters every algorithm takes. Test hooks (fail_*/hang_*/kill_*) let the test suite check
# that a failing, hanging or killed rank brings the run down with a message naming it.
COMMON: tuple[ParamSpec, ...] = (
    ParamSpec("dtype", str, "auto", "bf16, fp16 or fp32; auto = bf16 on GPUs, fp32 on CPU",
              choices=("auto", "bf16", "fp16", "fp32")),
    ParamSpec("backend", str, "auto", "nccl (GPUs) or gloo (CPU); auto picks nccl when every local rank has a GPU",
              choices=("auto", "nccl", "gloo")),
    ParamSpec("iters", int, 30, "timed iterations per measurement (the median is reported)", cpu_default=3),
    ParamSpec("warmup", int, 5, "untimed iterations before checking and timing", cpu_default=1),
    ParamSpec("profile_steps", int, 3, "profiled iterations (ProfilerStep#N), after one profiler warm-up step"),
    ParamSpec("seed", int, 1234, "random seed (inputs differ per rank: seed + rank)"),
    ParamSpec("pg_timeout_s", float, 300.0, "process-group timeout for collectives (seconds)"),
    ParamSpec("fail_rank", int, -1, "test hook: this rank raises at --fail-phase"),
    ParamSpec("fail_phase", str, "setup", "test hook: phase where --fail-rank raises", choices=PHASES),
    ParamSpec("hang_rank", int, -1, "test hook: this rank sleeps forever at --hang-phase"),
    ParamSpec("hang_phase", str, "setup", "test hook: phase where --hang-rank hangs", choices=PHASES),
    ParamSpec("kill_rank", int, -1, "test hook: this rank dies of SIGKILL at --kill-phase (no error file)"),
    ParamSpec("kill_phase", str, "setup", "test hook: phase where --kill-rank dies", choices=PHASES),
    ParamSpec("abort_rank", int, -1, "test hook: this rank dies of SIGABRT at --abort-phase (a C++ abort)"),
    ParamSpec("abort_phase", str, "exit", "test hook: phase where --abort-rank aborts", choices=PHASES),
    ParamSpec("corrupt_rank", int, -1, "test hook: this rank perturbs its output before the correctness check"),
)

_STREAMS = ParamSpec("streams", int, 2, "number of worker CUDA streams the steps rotate over")

# The tuned variants' schedule search (runners/autotune.py, runners/tuning.py).
TUNING: tuple[ParamSpec, ...] = (
    ParamSpec("tune", str, "auto", "tuned: auto = the schedule cached for this host and shape, else a timed search "
              "(then cached); retune = search again and replace the cached choice; off = the schedule the "
              "parameters name (steps, tuned_comm, comm_priority, graph)", choices=("auto", "retune", "off")),
    ParamSpec("tune_budget_s", float, 30.0, "tuned: seconds the search may take (its second round is skipped "
              "when the first used half of them, its third when the first two used three quarters)"),
    ParamSpec("graph", bool, False, "tuned with tune=off: capture the iteration as CUDA graphs and replay them"),
)

AG_GEMM = AlgorithmSpec(
    name="ag-gemm",
    module="runners.ag_gemm",
    summary="all-gather of A (rows sharded over ranks) pipelined with C = A @ B",
    variants={
        "baseline": "all-gather all of A, then one matmul (no overlap)",
        "sync-in-loop": "step s on stream s % streams; each worker waits on main inside the loop, after main "
                        "joined the previous step (serializes the streams)",
        "sync-before-loop": "same steps, all fork waits issued in a loop before the work loop",
        "host-sync": "same steps, stream.synchronize() on the host after each step",
        "tuned": "local rows first while the peers' rows arrive on a high-priority comm stream; transport, "
                 "chunks, gate, priority and CUDA graphs chosen per shape by a timed search (cached per host)",
        "fused-ref": "PyTorch's torch.ops.symm_mem.fused_all_gather_matmul, as the reference to beat",
    },
    params=(
        ParamSpec("M", int, 16384, "rows of A and C (global)", cpu_default=256),
        ParamSpec("K", int, 8192, "columns of A, rows of B", cpu_default=128),
        ParamSpec("N", int, 8192, "columns of B and C", cpu_default=128),
        ParamSpec("steps", int, 4, "S: pipeline steps (A is [S, ranks, M/(S*ranks), K])"),
        _STREAMS,
        ParamSpec("tuned_comm", str, "auto", "tuned with tune=off: transport, ce (copy engine, symmetric memory), "
                  "nccl, or auto (ce when CUDA symmetric memory works, else nccl/gloo)",
                  choices=("auto", "ce", "nccl")),
        ParamSpec("comm_priority", int, -1, "tuned with tune=off: CUDA priority of the comm streams (-1 = high)"),
        ParamSpec("nccl_max_ctas", int, 0, "set NCCL_MAX_CTAS for this run (0 = NCCL's default)"),
        ParamSpec("comm_first", int, 16000, "tuned: the local GEMM waits for a gate on the comm stream, then sleeps "
                  "this many GPU cycles (16000 = about 8 µs), so the barrier is dispatched before the GEMM takes "
                  "every SM; 0 = no gate"),
        *TUNING,
        *COMMON,
    ),
    cuda_only={
        "tuned": "with gloo: the search over the serial and all-gather schedules (no copy engine, no graphs)",
        "fused-ref": "with gloo: all-gather then matmul (the unfused semantics)",
    },
    workload="all-gather + matmul",
)

GEMM_RS = AlgorithmSpec(
    name="gemm-rs",
    module="runners.gemm_rs",
    summary="C = A @ B with K sharded over ranks, then reduce-scatter of C over rows",
    variants={
        "baseline": "one matmul, then reduce_scatter_tensor (no overlap)",
        "collective-pipelined": "per step: matmul of a row block, reduce-scatter it, on rotating streams",
        "ring": "ring reduce-scatter: step j computes the partial for rank (r+j+1) % D, adds what the "
                "right neighbour sent, passes it left with coalesced batch_isend_irecv",
        "ring-uncoalesced": "the ring with separate isend/irecv (ordered by rank parity to avoid deadlock)",
        "tuned": "peers' partial blocks first, each pushed (copy engine or NCCL) while the next computes; own "
                 "block last, reduced in its GEMM epilogue; chunks, barriers, priority and CUDA graphs chosen "
                 "per shape by a timed search (cached per host)",
        "fused-ref": "PyTorch's torch.ops.symm_mem.fused_matmul_reduce_scatter, as the reference to beat",
    },
    params=(
        ParamSpec("M", int, 16384, "rows of A and C (global)", cpu_default=256),
        ParamSpec("K", int, 16384, "global K (each rank holds K / ranks)", cpu_default=128),
        ParamSpec("N", int, 8192, "columns of B and C", cpu_default=128),
        ParamSpec("steps", int, 4, "S: pipeline steps (for ring: a multiple of the number of ranks; "
                  "tuned with tune=off: chunks per rank's block)"),
        _STREAMS,
        ParamSpec("tuned_comm", str, "auto", "tuned with tune=off: transport, ce (copy engine, symmetric memory), "
                  "p2p (NCCL/gloo send/recv), or auto (ce when CUDA symmetric memory works, else p2p)",
                  choices=("auto", "ce", "p2p")),
        ParamSpec("comm_priority", int, -1, "tuned with tune=off: CUDA priority of the comm streams (-1 = high)"),
        *TUNING,
        *COMMON,
    ),
    cuda_only={
        "tuned": "with gloo: the search over the serial and send/recv schedules (no copy engine, no graphs)",
        "fused-ref": "with gloo: matmul then reduce-scatter (the unfused semantics)",
    },
    workload="matmul + reduce-scatter",
)

SYMM_MEM = AlgorithmSpec(
    name="symm-mem",
    module="runners.symm_mem",
    summary="symmetric-memory (copy-engine) schedules: PyTorch's fused ops and a two-stream "
            "producer -> barrier -> p2p-copy matmul + reduce-scatter",
    variants={
        "fused-ag-matmul": "torch.ops.symm_mem.fused_all_gather_matmul (reference)",
        "fused-matmul-rs": "torch.ops.symm_mem.fused_matmul_reduce_scatter (reference)",
        "two-stream": "matmul+reduce-scatter as producer -> barrier -> p2p copy on two streams, no order fix",
        "two-stream-sleep": "the same with a small sleep kernel on stream 0 so stream 1's producer runs "
                            "first on every rank (fixes cross-rank scheduling order)",
    },
    params=(
        ParamSpec("M", int, 16384, "rows of A and C (global)", cpu_default=256),
        ParamSpec("K", int, 16384, "K (ag-matmul: full K; matmul-rs: global K, K / ranks per rank)",
                  cpu_default=128),
        ParamSpec("N", int, 8192, "columns of B and C", cpu_default=128),
        ParamSpec("steps", int, 2, "pieces each peer's chunk is produced and copied in (two-stream)"),
        ParamSpec("sleep_cycles", int, 100, "length of the ordering sleep kernel (GPU clock cycles)"),
        *COMMON,
    ),
    cuda_only={
        "fused-ag-matmul": "with gloo: all-gather then matmul (the unfused semantics)",
        "fused-matmul-rs": "with gloo: matmul then reduce-scatter (the unfused semantics)",
        "two-stream": "with gloo: the same producer -> exchange schedule with batch_isend_irecv, no streams",
        "two-stream-sleep": "with gloo: as two-stream (no GPU scheduler to order, the sleep is skipped)",
    },
    workload="matmul + reduce-scatter",
    workloads={"fused-ag-matmul": "all-gather + matmul"},
)

FSDP = AlgorithmSpec(
    name="fsdp",
    module="runners.fsdp",
    summary="FSDP2 (fully_shard per block) training steps of a small transformer stack",
    variants={
        "baseline": "replicated model, gradients all-reduced after backward (no overlap)",
        "zero3": "fully_shard per block, reshard after forward (FSDP2's implicit prefetching)",
        "zero3-no-prefetch": "ZeRO-3 with unshard on the compute stream and no backward prefetch",
        "zero3-prefetch": "ZeRO-3 with explicit forward/backward prefetch of the next --prefetch-depth blocks",
        "zero2": "fully_shard per block, parameters stay unsharded from forward to backward",
        "zero2-no-prefetch": "ZeRO-2 with unshard on the compute stream and no backward prefetch",
        "front-loaded": "ZeRO-2 where every all-gather is issued and waited for before any compute",
    },
    params=(
        ParamSpec("layers", int, 8, "transformer blocks", cpu_default=2),
        ParamSpec("dim", int, 4096, "model width (4096: the GPU sets the step; at 2048 the host did)", cpu_default=32),
        ParamSpec("heads", int, 32, "attention heads", cpu_default=4),
        ParamSpec("seq", int, 2048, "sequence length", cpu_default=16),
        ParamSpec("batch", int, 4, "sequences per rank", cpu_default=2),
        ParamSpec("prefetch_depth", int, 2, "blocks prefetched ahead by zero3-prefetch"),
        ParamSpec("lr", float, 1e-3, "SGD learning rate"),
        *COMMON,
    ),
    workload="training step",
)

THUNDER_FSDP = AlgorithmSpec(
    name="thunder-fsdp",
    module="runners.thunder_fsdp",
    summary="Lightning Thunder's own FSDP (thunder.distributed.fsdp over thunder.jit) on Llama-like blocks",
    variants={
        "baseline": "thunder.jit model replicated, gradients all-reduced after backward (no overlap)",
        "zero2-none": "fsdp(thunder.jit(model), ZERO2, bucketing NONE): one all-gather per parameter, kept "
                      "for backward",
        "zero2-block": "ZERO2 with bucketing BLOCK: one all-gather / reduce-scatter per block (packed buffers)",
        "zero3-none": "fsdp(..., ZERO3, bucketing NONE): parameters gathered again in backward",
        "zero3-block": "ZERO3 with bucketing BLOCK",
    },
    params=(
        ParamSpec("layers", int, 6, "Llama-like blocks", cpu_default=2),
        ParamSpec("dim", int, 4096, "model width (4096: the GPU sets the step; at 2048 the host did)", cpu_default=32),
        ParamSpec("heads", int, 32, "attention heads", cpu_default=4),
        ParamSpec("ffn", int, 5632, "SwiGLU hidden width", cpu_default=64),
        ParamSpec("seq", int, 2048, "sequence length", cpu_default=16),
        ParamSpec("batch", int, 2, "sequences per rank", cpu_default=2),
        ParamSpec("lr", float, 1e-3, "SGD learning rate"),
        *COMMON,
    ),
    workload="training step",
)

ALGORITHMS: dict[str, AlgorithmSpec] = {a.name: a for a in (AG_GEMM, GEMM_RS, SYMM_MEM, FSDP, THUNDER_FSDP)}
