"""What a collective's bus bandwidth is compared with: NCCL's formulas and the GPUs' link peaks.

Bus bandwidth (NCCL's nccl-tests, PERFORMANCE.md) makes collectives of any kind and group size
comparable with the hardware: algbw = S / t, with S the collective's data size (the whole
gathered buffer for all-gather, the whole input for reduce-scatter) and t its time, and
busbw = algbw × a factor per operation that counts what each rank must move:

    AllReduce              2 (n - 1) / n
    AllGather, ReduceScatter, AllToAll (and expert-parallel dispatch / combine)   (n - 1) / n
    Broadcast, Reduce, SendRecv, Send, Recv, peer copies                        1

busbw is what nccl-tests compares with the per-direction bandwidth of one GPU's links, so the
peaks below are per GPU and per direction (half the bidirectional figure vendors quote).
"""

from __future__ import annotations

import re

# (pattern on the GPU name the trace records, peak GB/s per direction, where the figure comes from)
LINK_PEAKS: tuple[tuple[str, float, str], ...] = (
    (r"H100.*PCIe|H100 PCIe", 64.0, "PCIe 5.0 x16"),
    (r"H800", 200.0, "NVLink 400 GB/s bidirectional"),
    (r"A800", 200.0, "NVLink 400 GB/s bidirectional"),
    (r"H100|H200|GH200", 450.0, "NVLink 4: 18 links, 900 GB/s bidirectional"),
    (r"B200|B300|GB200|GB300", 900.0, "NVLink 5: 18 links, 1.8 TB/s bidirectional"),
    (r"A100.*PCIe", 32.0, "PCIe 4.0 x16"),
    (r"A100", 300.0, "NVLink 3: 12 links, 600 GB/s bidirectional"),
    (r"MI300X|MI325X", 448.0, "Infinity Fabric: 7 links of 64 GB/s per direction"),
)

BUS_FACTOR_OPS = {
    "AllReduce": "allreduce",
    "AllGather": "gather", "ReduceScatter": "gather", "AllToAll": "gather", "EpDispatch": "gather",
    "EpCombine": "gather",
    "Broadcast": "one", "Reduce": "one", "SendRecv": "one", "Send": "one", "Recv": "one", "PeerCopy": "one",
}


def bus_factor(op: str, n: int | None) -> float | None:
    """NCCL's busbw / algbw for op over n ranks; None when the op or the group size is unknown."""
    kind = BUS_FACTOR_OPS.get(op)
    if kind == "one":
        return 1.0
    if kind is None or n is None or n < 1:
        return None
    return 2.0 * (n - 1) / n if kind == "allreduce" else (n - 1) / n


def link_peak_gbps(gpu_name: str) -> tuple[float, str] | None:
    """Per-direction link peak of a GPU model (GB/s) and what it is, from its name; None if unknown."""
    for pattern, gbps, what in LINK_PEAKS:
        if re.search(pattern, gpu_name or ""):
            return gbps, what
    return None


# Bytes per element of the dtypes the PyTorch profiler writes ("Float", "BFloat16", ...).
DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "bfloat16": 2, "half": 2, "float16": 2, "double": 8, "float64": 8,
    "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2, "char": 1, "int8": 1, "byte": 1,
    "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "complexfloat": 8, "complexdouble": 16, "complexhalf": 4, "uint16": 2, "uint32": 4, "uint64": 8,
}


def dtype_bytes(dtype: str) -> int | None:
    """Element size of a profiler dtype name; None when unknown."""
    return DTYPE_BYTES.get(str(dtype).strip().lower().removeprefix("torch."))
