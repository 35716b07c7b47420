"""Strided 2-D copies by the copy engine (cudaMemcpy2DAsync), which torch's copy_ does not make.

Why: the gemm-rs operand exchange over the concatenated K ("kcat") places each peer's A columns
beside the rank's own in one [rows, K] buffer, so one GEMM over K replaces a GEMM per K block (on
one H200, [16384, 4096] @ [4096, 8192] ran 0.967 x the GEMM alone, the two passes 1.024 x:
benchmarks/kcat_probe.py). The destination is a column block, rows apart by K elements; torch
copies such a tensor with a kernel on the SMs, beside the GEMM it should hide behind, while the copy
engine moves it with one 2-D memcpy. The runtime is the one torch has loaded (found in
/proc/self/maps), so streams and graph capture are shared with torch's own calls.
"""

from __future__ import annotations

import ctypes
import functools

import torch

_MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: direction from the pointers (unified addressing, peers included)


@functools.cache
def _runtime() -> ctypes.CDLL:
    torch.cuda.init()
    with open("/proc/self/maps") as maps:
        paths = sorted({line.split()[-1] for line in maps if "libcudart" in line.split()[-1]})
    if not paths:
        raise RuntimeError("the CUDA runtime is not loaded in this process (torch without CUDA?)")
    rt = ctypes.CDLL(paths[0])
    rt.cudaMemcpy2DAsync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                                     ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    rt.cudaMemcpy2DAsync.restype = ctypes.c_int
    return rt


def copy_2d(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst[:] = src for two 2-D tensors whose rows are contiguous (any row pitch), on the current
    stream: the copy engine on CUDA, copy_ on CPU."""
    if dst.shape != src.shape or dst.dim() != 2 or dst.dtype != src.dtype:
        raise ValueError(f"copy_2d: shapes/dtypes differ or not 2-D: {tuple(dst.shape)} {tuple(src.shape)}")
    if not dst.is_cuda:
        dst.copy_(src)
        return
    if dst.stride(1) != 1 or src.stride(1) != 1:
        raise ValueError("copy_2d: rows must be contiguous")
    es = dst.element_size()
    err = _runtime().cudaMemcpy2DAsync(dst.data_ptr(), dst.stride(0) * es, src.data_ptr(), src.stride(0) * es,
                                       dst.shape[1] * es, dst.shape[0], _MEMCPY_DEFAULT,
                                       torch.cuda.current_stream().cuda_stream)
    if err:
        raise RuntimeError(f"cudaMemcpy2DAsync failed with CUDA error {err}")
