"""ejkernel-cuda: the extension, registration and declared capabilities (any machine), and the
paged decode against the reference on long, ragged, GQA contexts (NVIDIA GPU only).

The shared ``page_attention`` conformance cases (tests/ops/page_attention) run this implementation too,
with its heuristic and each of its ``test_configs``.
"""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.errors import UnsupportedError
from ejkernel.ops import DeviceInfo, kernel_registry
from ejkernel.ops.impl import declared_decline
from ejkernel.testing import conformance as C
from ejkernel_cuda import _ffi
from ejkernel_cuda.page_attention import CudaPageAttention
from ejkernel_cuda.page_attention import heuristics as H

ON_GPU = jax.default_backend() == "gpu"
H200 = DeviceInfo(platform="gpu", kind="NVIDIA H200", compute_capability=(9, 0))


def _bind(**kw):
    return C.bind("page_attention", **kw)


def _impl() -> CudaPageAttention:
    impl = kernel_registry.get("page_attention", platform="cuda")
    assert isinstance(impl, CudaPageAttention)
    return impl


def test_registered_through_the_entry_point():
    impl = kernel_registry.get("page_attention", platform="cuda")
    assert isinstance(impl, CudaPageAttention)
    assert impl.plugin == "cuda"
    names = [i.name for i in kernel_registry.implementations("page_attention")]
    assert names.index("cuda") < names.index("xla")  # the CUDA kernel is preferred where it runs


def test_extension_is_built_and_exports_the_ffi_target():
    """CI builds the extension with nvcc: it must import and carry the handler."""
    ext = importlib.import_module("ejkernel_cuda._ext")
    regs = ext.registrations()
    # The grouped GEMM's target is there when 90a is among the architectures (CI's build).
    assert set(regs) == {"ejkernel_cuda_paged_decode"} | (
        {"ejkernel_cuda_gmm"} if ext.has_grouped_matmul_sm90 else set()
    )
    assert type(regs["ejkernel_cuda_paged_decode"]).__name__ == "PyCapsule"
    assert ext.cuda_runtime_version >= 12000
    assert ext.cuda_device_count() == (len(jax.devices("gpu")) if ON_GPU else 0)


@pytest.mark.skipif(ON_GPU, reason="checks the CPU-only decline")
def test_declines_without_a_gpu():
    case = C.PageAttentionCase("x", context_lens=(5, 9))
    kw = C.make_page_inputs(case)
    with pytest.raises(UnsupportedError, match="needs an NVIDIA GPU"):
        ejkernel.page_attention(**kw, platform="cuda")
    # auto falls back to XLA
    out = ejkernel.page_attention(**kw)
    assert out.shape == kw["query"].shape


def test_missing_extension_is_unavailable_with_the_reason(monkeypatch):
    real = importlib.import_module

    def fake(name, *a, **k):
        if name == "ejkernel_cuda._ext":
            raise ImportError("simulated: no compiled extension")
        return real(name, *a, **k)

    _ffi._load.cache_clear()
    monkeypatch.setattr(importlib, "import_module", fake)
    try:
        reason = CudaPageAttention().available(H200)
        assert reason is not None and "extension is not built" in reason and "simulated" in reason
        assert kernel_registry.environment(_impl(), H200) == reason
    finally:
        monkeypatch.undo()
        _ffi._load.cache_clear()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"d": 80}, "supports head_dim in (64, 128, 256), got 80"),
        ({"dv": 32}, "needs value_cache head_dim equal to key_cache's"),
    ],
)
def test_unsupported_shapes_are_declared(change, reason, monkeypatch):
    monkeypatch.setattr(_ffi, "availability", lambda: None)
    case = C.PageAttentionCase("x", context_lens=(5, 9), **change)
    args = _bind(**C.make_page_inputs(case))
    assert declared_decline(_impl(), args) == reason
    assert kernel_registry.check(_impl(), args, H200) == reason
    supported = _bind(**C.make_page_inputs(C.PageAttentionCase("x", context_lens=(5, 9), d=128, h=8, hk=2)))
    assert kernel_registry.check(_impl(), supported, H200) is None


def test_declaration():
    impl = _impl()
    assert tuple(impl.dtypes) == ("float32", "bfloat16", "float16")
    assert dict(impl.allowed_sizes) == {"head_dim": H.HEAD_DIMS}
    assert set(impl.unsupported) == {"value_head_dim"}
    assert "decline" not in vars(CudaPageAttention)  # everything it refuses is declared
    assert impl.version == "3"
    assert impl.test_configs == {
        "partition32": ejkernel.PageAttentionConfig(tokens_per_block=32),
        "splits3": ejkernel.PageAttentionConfig(num_splits=3),
    }


def test_old_gpus_are_unavailable(monkeypatch):
    monkeypatch.setattr(_ffi, "availability", lambda: None)
    old = DeviceInfo(platform="gpu", kind="Tesla V100", compute_capability=(7, 0))
    assert "compute capability >= 8.0" in CudaPageAttention().available(old)
    cpu = DeviceInfo(platform="cpu", kind="cpu", compute_capability=None)
    assert "needs an NVIDIA GPU" in CudaPageAttention().available(cpu)
    assert CudaPageAttention().available(H200) is None


def test_heuristic_partition_splits_long_contexts():
    # The benchmark shape: b32 hk8 h32 d128 ctx8192 bf16 on 132 SMs; the tensor-core path runs 2
    # CTAs per SM -> a nearly full wave of 264 slots -> one 8192-token partition per sequence
    # (256 CTAs, no merge pass); at ctx 32768 four.
    p = H.heuristic_partition(32, 8, 4, 128, 8192, 16, 132)
    assert p == 8192
    assert H.num_splits(32768, H.heuristic_partition(32, 8, 4, 128, 32768, 16, 132)) == 4
    assert 32 * 8 * H.num_splits(8192, p) >= H.WAVES * H.resident_ctas(4, 128) * 132
    # A big batch needs no split beyond the largest partition; a short context one partition.
    assert H.heuristic_partition(256, 8, 4, 128, 32768, 16, 132) == 8192
    assert H.heuristic_partition(1, 1, 1, 64, 40, 16, 132) == 64
    assert H.heuristic_partition(2, 1, 1, 128, 8192, 16, 132) == 256  # few sequences: many splits
    # The ring is as deep as the resident CTAs allow: 2 CTAs x 3 slots of 32 KiB (tensor cores,
    # 64 tokens of d128 bf16); 3 CTAs x 4 slots of 16 KiB (FMAs, float32 or variant 1).
    assert H.uses_mma(2, 128) and not H.uses_mma(4, 128) and not H.uses_mma(2, 256)
    assert H.heuristic_stages(4, 128, 1024, 16) == 3
    assert H.heuristic_stages(4, 128, 1024, 16, itemsize=4) == 4
    assert H.heuristic_stages(4, 128, 1024, 16, variant=1) == 4
    for itemsize in (2, 4):
        for groups in (1, 3, 4, 8, 16):
            for d in H.HEAD_DIMS:
                p = H.heuristic_partition(1, 1, groups, d, 65536, 16, 132, itemsize)
                stages = H.heuristic_stages(groups, d, p, 16, itemsize)
                assert H.MIN_STAGES <= stages <= H.MAX_STAGES
                assert H.smem_bytes(groups, d, p, 16, stages, itemsize) <= H.SMEM_LIMIT


def test_candidates_and_explicit_splits():
    args = _bind(**C.make_page_inputs(C.PageAttentionCase("x", context_lens=(300, 17), block_size=16)))
    cands = CudaPageAttention().candidate_cfgs(args, H200)
    parts = [c.tokens_per_block for c in cands]
    assert parts == sorted(parts) and parts[0] == 256 and parts[-1] == 320  # capped at the context
    itemsize = jnp.dtype(args.key_cache.dtype).itemsize
    deepest = H.heuristic_stages(args.num_groups, args.head_dim, 256, args.block_size, itemsize)
    assert {c.num_stages for c in cands} == {2, deepest} and deepest > 2
    for c in cands:
        CudaPageAttention().validate_cfg(c, args, H200)
    too_deep = ejkernel.PageAttentionConfig(tokens_per_block=256, num_stages=7)
    with pytest.raises(ValueError, match="num_stages must be in"):
        CudaPageAttention().validate_cfg(too_deep, args, H200)
    cfg = ejkernel.PageAttentionConfig(num_splits=3)
    assert CudaPageAttention._partition(cfg, args) == 102  # ceil(19 pages * 16 / 3)
    with pytest.raises(ValueError, match="tokens_per_block"):
        CudaPageAttention._partition(ejkernel.PageAttentionConfig(), args)


# ------------------------------------------------------------------------------------ GPU only

gpu = pytest.mark.skipif(not ON_GPU, reason="needs an NVIDIA GPU")

_LONG = [
    # ragged lengths around the page size up to 32k, GQA ratios 1/4/8, head dims 64/128/256
    C.PageAttentionCase("long-mha-d128", context_lens=(1, 7, 16, 17, 4099, 32768), h=8, hk=8, d=128, dtype="bfloat16"),
    C.PageAttentionCase("long-gqa4-d64", context_lens=(32768, 1, 15, 8191), h=16, hk=4, d=64, dtype="bfloat16"),
    C.PageAttentionCase("long-gqa8-d256", context_lens=(17, 20000, 16), h=16, hk=2, d=256, dtype="float16"),
    C.PageAttentionCase("gqa16-window", context_lens=(5000, 3, 700), h=16, hk=1, d=128, window=1000, dtype="bfloat16"),
    C.PageAttentionCase(
        "gqa3-sinks-softcap", context_lens=(2049, 0, 33), h=6, hk=2, d=128, sinks=2, soft_cap=10.0, dtype="bfloat16"
    ),
]


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("case", _LONG, ids=lambda c: c.name)
@pytest.mark.parametrize("partition,stages", [(None, None), (64, 2), (1000, 3), (2048, 6)])
def test_long_ragged_contexts(case, partition, stages):
    # Partitions shorter than, not a multiple of, and much longer than a ring slot's tokens.
    cfg = None if partition is None else ejkernel.PageAttentionConfig(tokens_per_block=partition, num_stages=stages)
    C.check_page_attention(lambda **kw: ejkernel.page_attention(**kw, platform="cuda", cfg=cfg), case, seed=1)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("case", _LONG[:2] + _LONG[3:], ids=lambda c: c.name)
def test_fma_path_for_half_caches(case, monkeypatch):
    # The FMA path (float32 caches' path; the sweep's other variant) on bf16/fp16 caches is exact too.
    from ejkernel_cuda.page_attention import impl as cuda_impl

    monkeypatch.setattr(cuda_impl, "LANE_VARIANT", 1)
    C.check_page_attention(lambda **kw: ejkernel.page_attention(**kw, platform="cuda"), case, seed=2)


@gpu
@pytest.mark.gpu
def test_runs_the_ffi_kernel_under_jit_and_vmap():
    case = C.PageAttentionCase("x", context_lens=(100, 3), h=8, hk=2, d=128, dtype="bfloat16")
    kw = C.make_page_inputs(case)
    f = jax.jit(
        lambda q: ejkernel.page_attention(
            q, kw["key_cache"], kw["value_cache"], kw["context_lens"], kw["block_tables"], platform="cuda"
        )
    )
    hlo = f.lower(kw["query"]).as_text()
    assert "ejkernel_cuda_paged_decode" in hlo  # the custom call, not an XLA fallback
    batched = jax.vmap(f)(jnp.stack([kw["query"], -kw["query"]]))
    np.testing.assert_allclose(np.asarray(batched[0], np.float32), np.asarray(f(kw["query"]), np.float32))


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("variant", [0, 1], ids=["mma", "fma"])
@pytest.mark.parametrize("sinks", [0, 2])
def test_one_partition(sinks, variant, monkeypatch):
    # One partition covers every context (32 pages of 16 <= 512 tokens): without sinks pass 1
    # writes the output itself and no merge runs; an empty context still gives zeros.
    from ejkernel_cuda.page_attention import impl as cuda_impl

    monkeypatch.setattr(cuda_impl, "LANE_VARIANT", variant)
    case = C.PageAttentionCase(
        "one-split", context_lens=(0, 5, 300, 511), h=8, hk=2, d=128, sinks=sinks, dtype="bfloat16"
    )
    cfg = ejkernel.PageAttentionConfig(tokens_per_block=512, num_stages=3)
    C.check_page_attention(lambda **kw: ejkernel.page_attention(**kw, platform="cuda", cfg=cfg), case, seed=3)


# Earlier releases' cache layout [num_blocks, num_kv_heads, block_size, dim], read in place by the
# same kernel through its strides: both ring paths, pages of a power-of-two length and not, one
# partition and split-K, every cache dtype.
_HEADS_MAJOR = [
    C.PageAttentionCase(
        "hm-gqa4-d128", context_lens=(1, 17, 4099, 16384), h=16, hk=4, d=128, dtype="bfloat16",
        cache_layout="blocks_heads_tokens",
    ),
    C.PageAttentionCase(
        "hm-gqa3-sinks-window-d64", context_lens=(2049, 0, 33), h=6, hk=2, d=64, sinks=2, window=700, soft_cap=10.0,
        dtype="float16", cache_layout="blocks_heads_tokens",
    ),
    C.PageAttentionCase(
        "hm-mha-d256-bs12", context_lens=(5000, 3, 300), h=4, hk=4, d=256, block_size=12, dtype="bfloat16",
        cache_layout="blocks_heads_tokens",
    ),
    C.PageAttentionCase(
        "hm-gqa8-f32-bs32", context_lens=(700, 64), h=16, hk=2, d=128, block_size=32, cache_layout="blocks_heads_tokens"
    ),
]  # fmt: skip


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("case", _HEADS_MAJOR, ids=lambda c: c.name)
@pytest.mark.parametrize("variant", [0, 1], ids=["mma", "fma"])
@pytest.mark.parametrize("partition", [None, 64, 100000], ids=["heuristic", "p64", "one-partition"])
def test_both_cache_layouts_in_place(case, variant, partition, monkeypatch):
    """The earlier layout matches the reference, and gives exactly the output of the same values
    in this library's layout (one kernel, only the strides differ); the compiled program hands
    the cache to the kernel as it is (no cache-sized copy or transpose)."""
    from ejkernel.ops.page_attention.cases import cache_sized_writes
    from ejkernel_cuda.page_attention import impl as cuda_impl

    monkeypatch.setattr(cuda_impl, "LANE_VARIANT", variant)
    cfg = None if partition is None else ejkernel.PageAttentionConfig(tokens_per_block=partition, num_stages=2)
    C.check_page_attention(lambda **kw: ejkernel.page_attention(**kw, platform="cuda", cfg=cfg), case, seed=5)

    kw = case.inputs(seed=5)
    arrays = ("query", "key_cache", "value_cache", "context_lens", "block_tables")
    opts = {k: v for k, v in kw.items() if k not in arrays and k != "cache_layout"}

    def call(layout):
        return jax.jit(lambda *a: ejkernel.page_attention(*a, cache_layout=layout, platform="cuda", cfg=cfg, **opts))

    heads_major = call("blocks_heads_tokens")
    hlo = heads_major.lower(*(kw[n] for n in arrays)).compile().as_text()
    assert "ejkernel_cuda_paged_decode" in hlo
    assert cache_sized_writes(hlo, kw["key_cache"].shape) == []
    library = {n: jnp.swapaxes(kw[n], 1, 2) for n in ("key_cache", "value_cache")}
    out_library = call("blocks_tokens_heads")(*({**kw, **library}[n] for n in arrays))
    np.testing.assert_array_equal(
        np.asarray(heads_major(*(kw[n] for n in arrays)), np.float32), np.asarray(out_library, np.float32)
    )
