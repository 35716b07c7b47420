"""Communication recognised beyond NCCL, by real kernel names, and the note for kernels no rule knows.

Every name below is a real kernel name as a profiler (Kineto, Nsight Systems, torch.profiler tables)
printed it; the comment above each says where it was found.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analyzers.crossrank.collective_table import comm_library, comm_op
from analyzers.io.load import load_traces
from analyzers.report import analyze
from analyzers.timeline.classify import classify_names, comm_lookalikes, default_rules, lookalike_note
from analyzers.timeline.model import NameTable, RankTrace, make_gpu_table

DATA = Path(__file__).parent / "data"

# (kernel name, library, operation)
REAL_COMM = [
    # DeepEP, DeepSeek-internal namespace: DeepSeek's prefill / decode profiles (deepseek-ai/profile-data), as a
    # public trace-analysis configuration lists them (tests/data/deepseek/README.md)
    ("void dpsk::ep::internode::notify_dispatch<false, 4>(int const*, long*, int, int const*, int*, int const*, "
     "int*, int, bool const*, int, int, int, int, int, int, int, int*, int*, int*, int*, void*, void**, int**, int, "
     "int, int*, int)", "DeepEP", "EpDispatch"),
    ("void dpsk::ep::internode::cached_notify<false>(int, int, int, int, int*, int, int, int const*, int const*, "
     "int*, void*, void**, int**, int, int, int, int*, bool, int)", "DeepEP", "Barrier"),
    ("void dpsk::ep::internode::combine<false, 4, __nv_bfloat16, 4, 4, 16, 24>(int4*, float*, bool const*, "
     "int4 const*, float const*, int4 const*, int4 const*, int const*, int const*, "
     "dpsk::ep::internode::SourceMeta const*, int const*, int const*, int const*, int, int, int, int, void*, int, "
     "int, void**, int, int, int, int, int*)", "DeepEP", "EpCombine"),
    ("void dpsk::ep::internode::dispatch_ll<true, 3, 10, 7168>(void*, float*, int*, long*, int*, int*, void*, int*, "
     "void*, void const*, long const*, int*, int*, int*, int, int, int, int, int, int, int, int*, int)",
     "DeepEP", "EpDispatch"),
    ("void dpsk::ep::internode::combine_ll<3, 10, 7168, 9>(void*, void*, int*, void*, void const*, long const*, "
     "float const*, int const*, long const*, int*, int, int*, int, int, int, int, int, int, int, int*, int)",
     "DeepEP", "EpCombine"),
    # DeepEP, open-source namespace: SGLang prefill profiles, the same configuration (sglang_prefill)
    ("void deep_ep::internode::dispatch<false, 4, false, 7, 4>(int4*, float*, long*, float*, "
     "deep_ep::internode::SourceMeta*, int4 const*, float const*, long const*, float const*, int*, int*, int*, int*, "
     "int const*, int const*, int const*, int const*, int, int, int, int, int, bool const*, void*, int, int, void**, "
     "int, int, int, int)", "DeepEP", "EpDispatch"),
    ("void deep_ep::internode::combine<false, 4, __nv_bfloat16, 16, 4, 4, 16, 24>(int4*, float*, bool const*, "
     "int4 const*, float const*, int const*, int const*, deep_ep::internode::SourceMeta const*, int const*, "
     "int const*, int const*, int, int, int, int, void*, int, int, void**, int, int, int, int)", "DeepEP", "EpCombine"),
    # vLLM custom all-reduce: kernel-share tables of vLLM profiles in public repositories (code index)
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, "
     "__nv_bfloat16*, int, int)", "custom all-reduce", "AllReduce"),
    # SGLang custom all-reduce: the sgl-project/sglang GitHub thread 6067 names cross_device_reduce_2stage; the full
    # signature from a public SGLang B200 kernel report (code index)
    ("void sglang::cross_device_reduce_1stage<__nv_bfloat16, 8>(sglang::RankData*, sglang::RankSignals, "
     "sglang::Signal*, __nv_bfloat16*, int, int)", "custom all-reduce", "AllReduce"),
    # TensorRT-LLM all-reduce (nsys kernel summary in apache/tvm pull request 16842)
    ("void tensorrt_llm::twoShotAllReduceKernel<__half, (int)8>(tensorrt_llm::AllReduceParams)",
     "TensorRT-LLM", "AllReduce"),
    ("void tensorrt_llm::oneShotAllReduceKernel<__half, (int)8>(tensorrt_llm::AllReduceParams)",
     "TensorRT-LLM", "AllReduce"),
    # TensorRT-LLM all-reduce fusion as FlashInfer ships it (the flashinfer-ai/flashinfer GitHub thread 3825)
    ("tensorrt_llm::_v1::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport", "TensorRT-LLM", "AllReduce"),
    # PyTorch symmetric memory, multimem (NVLS) all-reduce: vLLM profile kernel tables (code index)
    ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long, "
     "unsigned int**, unsigned long, unsigned long)", "symmetric memory", "AllReduce"),
    # symmetric memory barrier: this repository's own sample_traces/symm-mem/two-stream (2xH200)
    ("c10d::symmetric_memory::barrier_kernel(unsigned int**, int, int, int, unsigned long, unsigned long)",
     "symmetric memory", "Barrier"),
    # NVSHMEM: kernel-name map of a public flux / NVSHMEM all-to-all study, and NVSHMEM's
    # src/include/internal/non_abi/nvshmemi_h_to_d_coll_defs.cuh (barrier_on_stream_kernel_threadgroup)
    ("void barrier_on_stream_kernel_threadgroup<(threadgroup_t)1>(int, int)", "NVSHMEM", "Barrier"),
    ("nvshmemi_proxy_rma_signal_entrypoint_blocking", "NVSHMEM", "Other"),
    # RCCL on ROCm keeps NCCL's symbol names: AMD_LOG_LEVEL=4 "ShaderName" lines quoted in public notes
    ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", "NCCL/RCCL", "Other"),
    # oneCCL on Intel XPU: the Kineto kernel event of the intel/torch-xpu-ops GitHub thread 5384
    ("oneccl_reduce_base<float, 2, 16, 1, 1, 2>", "oneCCL", "Other"),
]


@pytest.mark.parametrize(("name", "library", "op"), REAL_COMM, ids=[n[:40] for n, _, _ in REAL_COMM])
def test_real_comm_kernels_are_comm(name, library, op):
    assert classify_names([name], default_rules())[0] == "comm"
    assert comm_library(name) == library
    assert comm_op(name) == op


# Real kernels that must stay compute although they sit beside communication.
REAL_COMPUTE = [
    # DeepEP's token layout counts locally (deepseek_prefill / sglang_prefill configurations)
    "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, int, int)",
    "void deep_ep::internode::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, int, "
    "int)",
    # FlashMLA's split-KV combine (deepseek_decode configuration): "combine" outside an ep namespace
    "void flash::flash_fwd_splitkv_mla_combine_kernel<cutlass::bfloat16_t, float, long, 512, 64>"
    "(Flash_fwd_mla_params)",
    # DeepGEMM (dpsk::gemm, deep_gemm): compute in DeepSeek's own namespaces
    "void dpsk::gemm::fp8_gemm_kernel<4096u, 7168u, 128u, 128u, 128u, 5u, 128u, 128u, 2u, (dpsk::gemm::GemmType)1>"
    "(__nv_bfloat16*, float*, int*, unsigned int, unsigned int, CUtensorMap_st, CUtensorMap_st, CUtensorMap_st, "
    "CUtensorMap_st)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)",
]


@pytest.mark.parametrize("name", REAL_COMPUTE, ids=[n[:40] for n in REAL_COMPUTE])
def test_real_compute_neighbours_stay_compute(name):
    assert classify_names([name], default_rules())[0] == "compute"
    assert lookalike_note(_trace([name]), comm_found=True) is None  # and no note suggests otherwise


def _trace(names: list[str]) -> RankTrace:
    table = NameTable(names)
    n = len(names)
    t = RankTrace(0, "synthetic", "synthetic", table,
                  make_gpu_table(n, start_ns=np.arange(n) * 100, end_ns=np.arange(n) * 100 + 50,
                                 name_id=np.arange(n)))
    t.gpu["category"] = classify_names(names, default_rules())
    return t


def test_unknown_comm_looking_kernel_gets_a_note_naming_the_rule():
    # NanoDeploy's dLSlime all-to-all: named in a public CP-cost methodology note; no rule knows it.
    unknown = "dlslime::intranode_alltoall_kernel"
    t = _trace([unknown, "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*)"])
    assert comm_lookalikes(t) == [unknown]
    note = lookalike_note(t, comm_found=False)
    assert note is not None and f"--comm-kernel '{unknown}'" in note and "no kernel was recognised" in note


def test_ep_dispatch_in_an_unknown_namespace_is_a_lookalike():
    t = _trace(["void mylib::ep::low_latency_dispatch<8>(int*)", "flash::flash_fwd_splitkv_mla_combine_kernel"])
    assert comm_lookalikes(t) == ["mylib::ep::low_latency_dispatch"]


def test_deepseek_training_excerpt_counts_deepep_as_comm():
    # tests/data/deepseek: dispatch [472450, 475770) and combine [483541, 490090) µs on stream 27; compute beside
    # combine on streams 7 and 23: [483541, 483879) 338 + [484223, 484545) 322 + [488525, 490090) 1565 = 2225 µs
    # (the stream-23 kernel's part, [483541, 483562), lies inside the first); nothing beside dispatch.
    traces = load_traces([DATA / "deepseek" / "train_excerpt.json"])
    report = analyze(traces)
    m = report.ranks[0]
    assert m.comm_ns == (3320 + 6549) * 1000
    assert m.overlap_ns == 2225 * 1000
    assert m.overlap_ratio == pytest.approx(2225 / 9869)
    assert traces.world_size == 64
    table = report.collectives
    assert sorted(table.rows["op"]) == ["EpCombine", "EpDispatch"]
    assert set(table.rows["library"]) == {"DeepEP"}
    combine = table.rows[table.rows["op"] == "EpCombine"].iloc[0]
    assert combine["overlap_share"] == pytest.approx(2225 / 6549)
    assert not combine["overlapped"]  # compute beside 34 % of it, under the 50 % line
    assert np.isnan(combine["busbw_gbps"])  # DeepEP kernels carry no message size
    assert any("no message size" in n for n in table.notes)
