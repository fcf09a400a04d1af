"""The CUDA ``grouped_matmul`` (CUTLASS 3 grouped GEMMs on sm_90a): registration, declaration and
config checks on any machine; on a Hopper GPU the forward and both gradients against the op's
float32 reference at sizes that run many tiles per group, empty groups, rows past the groups, an
expert-parallel slice, a ``[g, n, k]`` rhs, both 16-bit dtypes and every output dtype.

The shared ``grouped_matmul`` conformance cases (tests/ops/grouped_matmul) run this implementation too
where its declaration accepts them (16-bit inputs, k and n multiples of 8).
"""

from __future__ import annotations

import importlib
import types

import jax
import pytest

import ejkernel
from ejkernel.errors import UnsupportedError
from ejkernel.ops import DeviceInfo, kernel_registry
from ejkernel.ops.grouped_matmul import GroupedMatmulConfig
from ejkernel.ops.grouped_matmul.bench import group_sizes_for
from ejkernel.ops.grouped_matmul.cases import GroupedMatmulCase
from ejkernel.ops.impl import declared_decline
from ejkernel.testing import conformance as C
from ejkernel_cuda import _ffi
from ejkernel_cuda.grouped_matmul import CudaGroupedMatmul
from ejkernel_cuda.grouped_matmul import heuristics as H

HOPPER = jax.default_backend() == "gpu" and getattr(jax.devices()[0], "compute_capability", "") == "9.0"
H200 = DeviceInfo(platform="gpu", kind="NVIDIA H200", compute_capability=(9, 0))


def _impl() -> CudaGroupedMatmul:
    impl = kernel_registry.get("grouped_matmul", platform="cuda")
    assert isinstance(impl, CudaGroupedMatmul)
    return impl


def _bind(case: GroupedMatmulCase):
    return C.bind("grouped_matmul", **case.inputs())


def _sizes(m: int, g: int, dist: str, empty: int = 0) -> tuple[int, ...]:
    """``g`` group sizes over ``m - 37`` rows (37 rows past the groups), ``empty`` of them zero."""
    s = group_sizes_for(m - 37, g, dist, seed=1)
    if empty:
        moved = s[:empty].sum()
        s[:empty] = 0
        s[-1] += moved
    return tuple(int(x) for x in s)


def test_registered_above_triton_and_xla():
    impl = _impl()
    assert impl.plugin == "cuda"
    names = [i.name for i in kernel_registry.implementations("grouped_matmul")]
    assert names.index("cuda") < names.index("triton") < names.index("xla")


def test_extension_exports_the_grouped_gemm():
    """Built with 90a (CI's tests session builds the default architectures): the module carries the
    handler and its workspace query; built without, neither."""
    ext = importlib.import_module("ejkernel_cuda._ext")
    assert ext.cuda_architectures  # CMAKE_CUDA_ARCHITECTURES, comma-separated
    if "90a" not in ext.cuda_architectures:
        assert not ext.has_grouped_matmul_sm90 and not hasattr(ext, "gmm_workspace_bytes")
        assert "ejkernel_cuda_gmm" not in ext.registrations()
        return
    assert ext.has_grouped_matmul_sm90
    assert "ejkernel_cuda_gmm" in ext.registrations()
    small = ext.gmm_workspace_bytes(
        layout=0, float16=False, out_f32=True, groups=8, config=0, m=64, k=64, n=64, sm_count=132
    )
    big = ext.gmm_workspace_bytes(
        layout=2, float16=True, out_f32=False, groups=256, config=0, m=64, k=64, n=64, sm_count=132
    )
    assert 0 < small < big  # per-group shapes, pointers and strides, plus CUTLASS's workspace


def test_declaration_and_declines(monkeypatch):
    impl = _impl()
    assert tuple(impl.dtypes) == ("bfloat16", "float16")
    assert set(impl.allowed_sizes) == {"k", "n"}
    assert "decline" not in vars(CudaGroupedMatmul)  # everything it refuses is declared
    monkeypatch.setattr(_ffi, "availability", lambda: None)
    ok = _bind(GroupedMatmulCase("x", m=64, k=32, n=48, group_sizes=(10, 0, 30), dtype="bfloat16"))
    assert declared_decline(impl, ok) is None
    odd = _bind(GroupedMatmulCase("x", m=64, k=36, n=48, group_sizes=(10, 0, 30), dtype="bfloat16"))
    assert declared_decline(impl, odd) == "supports k a multiple of 8 (16-byte rows for the TMA copies), got 36"
    f32 = _bind(GroupedMatmulCase("x", m=64, k=32, n=48, group_sizes=(10, 0, 30), dtype="float32"))
    assert declared_decline(impl, f32) == "supports bfloat16, float16 inputs, got float32"


def test_needs_sm90(monkeypatch):
    monkeypatch.setattr(_ffi, "availability", lambda: None)
    built_with_90a = types.SimpleNamespace(has_grouped_matmul_sm90=True, cuda_architectures="80-real,90a-real")
    monkeypatch.setattr(_ffi, "_load", lambda: (built_with_90a, None))
    impl = CudaGroupedMatmul()
    assert "compute capability 9.0" in impl.available(
        DeviceInfo(platform="gpu", kind="A100", compute_capability=(8, 0))
    )
    assert "compute capability 9.0" in impl.available(
        DeviceInfo(platform="gpu", kind="B200", compute_capability=(10, 0))
    )
    assert "needs an NVIDIA GPU" in impl.available(DeviceInfo(platform="cpu", kind="cpu", compute_capability=None))
    assert impl.available(H200) is None


def test_declines_on_hopper_when_built_without_sm90a(monkeypatch):
    """An extension built for, say, A100 only has no grouped GEMM: on an H100 the implementation
    declines, naming the build's architectures and the fix."""
    monkeypatch.setattr(_ffi, "availability", lambda: None)
    without = types.SimpleNamespace(has_grouped_matmul_sm90=False, cuda_architectures="80-real")
    monkeypatch.setattr(_ffi, "_load", lambda: (without, None))
    why = CudaGroupedMatmul().available(H200)
    assert why == (
        "the ejkernel_cuda extension was built for 80-real without sm_90a, so it has no grouped GEMM; "
        "rebuild it with 90a-real in EJKERNEL_CUDA_ARCHS"
    )


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="checks the CPU-only decline")
def test_declines_without_a_gpu():
    kw = GroupedMatmulCase("x", m=64, k=32, n=48, group_sizes=(10, 0, 30), dtype="bfloat16").inputs()
    with pytest.raises(UnsupportedError, match="needs an NVIDIA Hopper GPU"):
        ejkernel.grouped_matmul(**kw, platform="cuda")


def test_configs():
    cfg = H.heuristic(16384, 2048, 1536, 64)
    assert (cfg.block_m, cfg.block_n, cfg.block_k) == (128, 256, 64)
    assert H.config_index(cfg) == 0
    assert H.candidates(16384, 2048, 1536, 64) == [cfg]
    with pytest.raises(ValueError, match="must be one of 128x256x64, got 64x128x64"):
        H.config_index(GroupedMatmulConfig(block_m=64, block_n=128, block_k=64))
    with pytest.raises(ValueError, match="num_stages is fixed by the compiled kernels"):
        H.config_index(GroupedMatmulConfig(block_m=128, block_n=256, block_k=64, num_stages=3))
    with pytest.raises(ValueError, match="tgmm_num_stages is fixed by the compiled kernels"):
        H.config_index(GroupedMatmulConfig(block_m=128, block_n=256, block_k=64, tgmm_num_stages=3))
    with pytest.raises(ValueError, match="split_k is fixed"):
        _impl().validate_cfg(GroupedMatmulConfig(block_m=128, block_n=256, block_k=64, split_k=2), None, H200)


CASES = [
    GroupedMatmulCase("few-large", m=4133, k=512, n=384, group_sizes=_sizes(4133, 8, "multinomial"), dtype="bfloat16"),
    GroupedMatmulCase(
        "many-small-zipf-empty", m=3001, k=384, n=320, group_sizes=_sizes(3001, 64, "zipf", empty=5), dtype="bfloat16"
    ),
    GroupedMatmulCase(
        "rhsT-fp16",
        m=2048,
        k=256,
        n=200,
        group_sizes=_sizes(2048, 16, "zipf", empty=2),
        transpose_rhs=True,
        dtype="float16",
    ),
    GroupedMatmulCase(
        "expert-shard-same-dtype-out",
        m=1500,
        k=320,
        n=256,
        group_sizes=_sizes(1500, 12, "multinomial"),
        group_offset=4,
        local_groups=6,
        existing_out=True,
        bias=True,
        dtype="bfloat16",
        out_dtype=None,
    ),
    GroupedMatmulCase(
        "fp16-same-dtype-out", m=777, k=128, n=136, group_sizes=_sizes(777, 5, "zipf"), dtype="float16", out_dtype=None
    ),
    GroupedMatmulCase("one-group-holds-all", m=640, k=64, n=64, group_sizes=(0, 603, 0), dtype="bfloat16"),
]


@pytest.mark.skipif(not HOPPER, reason="needs an H100 / H200 (sm_90a kernels)")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_against_the_reference(case):
    C.check(lambda **kw: ejkernel.grouped_matmul(**kw, platform="cuda"), case, op="grouped_matmul")


@pytest.mark.skipif(not HOPPER, reason="needs an H100 / H200 (sm_90a kernels)")
def test_other_output_dtypes_are_the_float32_result_rounded_once():
    """fp16 inputs, bf16 output: what an epilogue writing bf16 would give (the float32 result
    rounded once), bit for bit."""
    kw = GroupedMatmulCase("x", m=777, k=128, n=136, group_sizes=_sizes(777, 5, "zipf"), dtype="float16").inputs()
    kw.pop("preferred_element_type", None)
    f32 = ejkernel.grouped_matmul(**kw, preferred_element_type=jax.numpy.float32, platform="cuda")
    bf16 = ejkernel.grouped_matmul(**kw, preferred_element_type=jax.numpy.bfloat16, platform="cuda")
    assert bf16.dtype == jax.numpy.bfloat16
    assert bool((bf16 == f32.astype(jax.numpy.bfloat16)).all())


@pytest.mark.skipif(not HOPPER, reason="needs an H100 / H200 (sm_90a kernels)")
def test_jit_and_vmap():
    case = CASES[0]
    kw = case.inputs()
    f = jax.jit(lambda lhs, rhs, gs: ejkernel.grouped_matmul(lhs, rhs, gs, platform="cuda"))
    want = f(kw["lhs"], kw["rhs"], kw["group_sizes"])
    both = jax.vmap(f, in_axes=(0, None, None))(jax.numpy.stack([kw["lhs"], kw["lhs"]]), kw["rhs"], kw["group_sizes"])
    assert bool((both[0] == want).all()) and bool((both[1] == want).all())
