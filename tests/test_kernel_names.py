"""Kernel-name normalization: compiler-chosen parts go, the identity of the work stays."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzers.timeline.kernel_names import normalize_kernel_name, normalize_names

# (raw name from a real trace, expected normalized name)
CASES = [
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "ncclDevKernel_AllGather_RING_LL"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "ncclKernel_AllReduce_RING_LL_Sum_float"),
    ("void c10d::symmetric_memory::barrier_kernel(unsigned int**, unsigned long, int, int)",
     "c10d::symmetric_memory::barrier_kernel"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
     "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
     "at::native::vectorized_elementwise_kernel<at::native::CUDAFunctor_add, at::detail::Array>"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::sigmoid_kernel_cuda(at::TensorIteratorBase&)"
     "::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(float)#1}, "
     "at::detail::Array<char*, 2> >(int, at::native::sigmoid_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}"
     "::operator()() const::{lambda()#4}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)",
     "at::native::vectorized_elementwise_kernel<at::native::sigmoid_kernel_cuda, at::detail::Array>"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 64, 64>(float*, "
     "at::native::(anonymous namespace)::CatArrInputTensorMetadata<float, unsigned int, 64, 64>, int, unsigned int)",
     "at::native::CatArrayBatchedCopy<float, unsigned int>"),
    ("void cub::DeviceScanKernel<cub::AgentScanPolicy<128, 15, int, (cub::BlockLoadAlgorithm)3, "
     "(cub::CacheLoadModifier)0>, int*, int*, cub::ScanTileState<int, true>, cub::Sum, int>(int*)",
     "cub::DeviceScanKernel<cub::AgentScanPolicy, int*, cub::ScanTileState, cub::Sum, int>"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>"
     "(cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4::Params)",
     "cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>"),
    ("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float, false, true, 7, "
     "cublasGemvParams<float> >(cublasGemvParams<float>)", "internal::gemvx::kernel<int, float, cublasGemvParams>"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
     "__5x_cublas", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
                    "segment_k_off_kernel__5x_cublas"),
    ("triton_poi_fused_add_mul_0", "triton_poi_fused_add_mul"),
    ("triton_red_fused__to_copy_12", "triton_red_fused__to_copy"),
    ("void split_embedding_backward_codegen_kernel_warp_per_row_1<float, float, 5ul>(int)",
     "split_embedding_backward_codegen_kernel_warp_per_row<float>"),
    ("my_kernel_0x7f3a12bc", "my_kernel"),
    # a tile shape is not an address (it once lost "0x128" and became "..._32_64x3...")
    ("nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT", "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT"),
    # Nsight Systems (cu++filt) spelling: <unnamed>, [lambda() (instance N)], (int)4 casts, void in arguments
    ("void at::native::vectorized_elementwise_kernel<(int)2, at::native::<unnamed>::where_kernel_impl("
     "at::TensorIterator &)::[lambda() (instance 1)]::operator ()() const::[lambda() (instance 8)]::operator ()() "
     "const::[lambda(bool, long, long) (instance 1)], std::array<char *, (unsigned long)4>>(int, T2, T3)",
     "at::native::vectorized_elementwise_kernel<at::native::where_kernel_impl, std::array>"),
    ("void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<"
     "at::native::CUDAFunctor_add<float>>(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)",
     "at::native::elementwise_kernel<at::native::gpu_kernel_impl_nocast>"),
    ("void <unnamed>::softmax_warp_forward<float, float, float, (int)6, (bool)0, (bool)0>(T2 *, const T1 *, int)",
     "softmax_warp_forward<float>"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)", "ncclDevKernel_SendRecv"),
    ("Memcpy HtoD (Pinned -> Device)", "Memcpy HtoD (Pinned -> Device)"),
    ("Memset  (Device)", "Memset (Device)"),
    ("volta_sgemm_128x64_nn", "volta_sgemm_128x64_nn"),
]


@pytest.mark.parametrize(("raw", "expected"), CASES)
def test_known_names(raw: str, expected: str) -> None:
    assert normalize_kernel_name(raw) == expected


def test_collectives_stay_distinct():
    names = ["ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
             "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
             "ncclDevKernel_AllGather_RING_LL128(ncclDevComm*, unsigned long, ncclWork*)",
             "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"]
    assert len({normalize_kernel_name(n) for n in names}) == len(names)
    assert len({normalize_kernel_name(n, coarse=True) for n in names}) == len(names)


def test_kineto_and_nsys_spellings_of_one_kernel_agree():
    kineto = ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>("
              "float*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<float, unsigned int, 128, 1>)")
    nsys = ("void at::native::<unnamed>::CatArrayBatchedCopy<float, unsigned int, (int)2, (int)128, (int)1>("
            "T1 *, at::native::<unnamed>::CatArrInputTensorMetadata<T1, T2, (int)128, (int)1>)")
    expected = "at::native::CatArrayBatchedCopy<float, unsigned int>"
    assert normalize_kernel_name(kineto) == normalize_kernel_name(nsys) == expected
    k_lam = ("void at::native::vectorized_elementwise_kernel<4, at::native::tanh_kernel_cuda(at::TensorIteratorBase&)"
             "::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(float)#1}, "
             "std::array<char*, 2ul> >(int, T2, T3)")
    n_lam = ("void at::native::vectorized_elementwise_kernel<(int)4, "
             "at::native::tanh_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 2)]::operator ()() const::"
             "[lambda() (instance 2)]::operator ()() const::"
             "[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)")
    assert normalize_kernel_name(k_lam) == normalize_kernel_name(n_lam)


def test_compiler_chosen_parts_merge_but_the_operation_does_not():
    add4 = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
            "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)")
    add2 = add4.replace("kernel<4,", "kernel<2,")
    mul = add4.replace("CUDAFunctor_add", "CUDAFunctor_mul")
    assert add2 != add4 and normalize_kernel_name(add2) == normalize_kernel_name(add4)
    assert normalize_kernel_name(mul) != normalize_kernel_name(add4)
    lam = ("void at::native::vectorized_elementwise_kernel<4, at::native::neg_kernel_cuda(at::TensorIteratorBase&)"
           "::{lambda()#2}::operator()() const::{lambda()#14}::operator()() const::{lambda(float)#1}, "
           "at::detail::Array<char*, 2> >(int)")
    assert normalize_kernel_name(lam) == normalize_kernel_name(lam.replace("#14", "#12"))
    bf16 = "void splitKreduce_kernel<__nv_bfloat16, float, true>(cublasSplitKParams<float>)"
    f32 = "void splitKreduce_kernel<float, float, true>(cublasSplitKParams<float>)"
    assert normalize_kernel_name(bf16) != normalize_kernel_name(f32)  # dtype is the work, not noise
    assert normalize_kernel_name("Memcpy HtoD (Pinned -> Device)") != normalize_kernel_name(
        "Memcpy DtoD (Device -> Device)")


def test_coarse_merges_tiles_only_when_asked():
    a = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(Params)"
    b = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_tn_align1>(Params)"
    nt = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nt_align1>(Params)"
    assert normalize_kernel_name(a) != normalize_kernel_name(b)
    assert normalize_kernel_name(a, coarse=True) == normalize_kernel_name(b, coarse=True)
    assert normalize_kernel_name(nt, coarse=True) != normalize_kernel_name(b, coarse=True)  # layout kept
    assert normalize_kernel_name("volta_sgemm_128x32_nn", coarse=True) == normalize_kernel_name(
        "volta_sgemm_64x64_nn", coarse=True)


def test_truncated_and_odd_names_do_not_fail():
    cut = "void at::native::vectorized_elementwise_kernel<4, at::native::sigmoid_kernel_cuda(at::TensorIter"
    assert normalize_kernel_name(cut) == "at::native::vectorized_elementwise_kernel"
    assert normalize_kernel_name("(") == "("  # nothing left to keep: the name as it was
    assert normalize_kernel_name("  ") == ""
    assert normalize_kernel_name("void operator()<>()") == "operator"


def test_normalize_names_modes():
    names = ["triton_poi_fused_add_0", "triton_poi_fused_add_1", "volta_sgemm_128x32_nn", "volta_sgemm_64x64_nn"]
    assert normalize_names(names).tolist() == ["triton_poi_fused_add", "triton_poi_fused_add",
                                               "volta_sgemm_128x32_nn", "volta_sgemm_64x64_nn"]
    assert normalize_names(names, "raw").tolist() == names
    assert normalize_names(names, "coarse").tolist()[2:] == ["volta_sgemm_#_nn"] * 2
    assert normalize_names([], "normalized").tolist() == []
    with pytest.raises(ValueError, match="kernel-name mode"):
        normalize_names(names, "fuzzy")


# Kernel-like names: qualified identifiers with template lists of types and literals, and
# parameter lists, as compilers print them.
_ident = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
_qualified = st.lists(_ident, min_size=1, max_size=3).map("::".join)
_literal = st.one_of(st.integers(0, 512).map(str), st.sampled_from(["true", "false", "4ul", "(cub::Algo)3"]))


@st.composite
def _type(draw, depth: int = 0) -> str:
    name = draw(_qualified)
    if depth < 2 and draw(st.booleans()):
        args = draw(st.lists(st.one_of(_literal, _type(depth + 1)), min_size=1, max_size=3))
        name += "<" + ", ".join(args) + ">"
    return name


@st.composite
def _kernel(draw) -> str:
    name = ("void " if draw(st.booleans()) else "") + draw(_type())
    if draw(st.booleans()):
        name += "(" + ", ".join(draw(st.lists(_type(1), max_size=3))) + ")"
    return name


@settings(max_examples=300, deadline=None)
@given(_kernel())
def test_normalization_is_idempotent_and_never_empty(name: str) -> None:
    once = normalize_kernel_name(name)
    assert once and "(" not in once and "void " not in once
    assert normalize_kernel_name(once) == once
    coarse = normalize_kernel_name(name, coarse=True)
    assert normalize_kernel_name(coarse, coarse=True) == coarse
