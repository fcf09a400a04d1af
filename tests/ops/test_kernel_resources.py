"""The GPU implementations' declared needs (``KernelImpl.resources``): every heuristic config fits
every device profile, and each declaration bounds what Triton really allocates (its compiled
``metadata.shared``, compiled here for sm_90 and sm_80 without a GPU)."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel  # noqa: F401  (loads the ops)
from ejkernel.ops import DeviceInfo, KernelImpl, Platform, bind, get_op, kernel_registry, profile_for, resolve_config
from ejkernel.ops.grouped_matmul import GroupedMatmulConfig
from ejkernel.ops.grouped_matmul.bench import group_sizes_for
from ejkernel.ops.impl import declared_decline
from ejkernel.ops.resources import unfit

H200 = DeviceInfo(platform="gpu", kind="NVIDIA H200", compute_capability=(9, 0))
# The grouped_matmul benchmark shapes (m, k, n, groups, group-size distribution).
GMM_SHAPES = (
    (16384, 4096, 2048, 8, "multinomial"),
    (16384, 2048, 1536, 64, "multinomial"),
    (65536, 4096, 1408, 64, "multinomial"),
    (8192, 7168, 2048, 256, "zipf"),
)


def _gmm_args(m, k, n, g, dist, dtype=jnp.bfloat16, out=None, **kw):
    """Bound grouped_matmul arguments of the shape (zeros: only shapes and dtypes matter)."""
    sizes = jnp.asarray(group_sizes_for(m, g, dist))
    if out is not None:
        kw["preferred_element_type"] = out
    return dict(lhs=jnp.zeros((m, k), dtype), rhs=jnp.zeros((g, k, n), dtype), group_sizes=sizes, **kw)


# -- every heuristic config against every device profile ---------------------------------------------

PROFILE_DEVICES = [
    DeviceInfo(platform="gpu", kind=kind, compute_capability=cc)
    for kind, cc in (("A100", (8, 0)), ("A10", (8, 6)), ("L4", (8, 9)), ("H100", (9, 0)), ("RTX 5090", (12, 0)))
]
S = jax.ShapeDtypeStruct
I32, F32 = jnp.int32, jnp.float32


def _attention(dt):
    for d in (64, 128, 256):
        x = S((2, 4096, 16, d), dt)
        kv = S((2, 4096, 4, d), dt)
        yield dict(query=x, key=kv, value=kv, causal=True)
        yield dict(query=x, key=x, value=x)


def _linear(op):
    def shapes(dt):
        for b, t, d in ((4, 4096, 64), (4, 4096, 128), (4, 4096, 256), (1, 32768, 128)):
            x = S((b, t, 16, d), dt)
            if op == "lightning_attention":
                yield dict(query=x, key=x, value=x, layer_idx=5, num_layers=24)
            elif op == "state_space_v2":
                yield dict(
                    x=x, A=S((16,), F32), B=S((b, t, 1, d), dt), C=S((b, t, 1, d), dt), D=S((16,), F32),
                    dt=S((b, t, 16), dt),
                )  # fmt: skip
            else:  # gla_attention, recurrent_attention: a per-key-channel gate
                yield dict(query=x, key=x, value=x, g=S((b, t, 16, d), F32))

    return shapes


def _delta(op):
    def shapes(dt):
        for d in (64, 128, 256):
            x = S((4, 4096, 16, d), dt)
            if op == "gated_delta_rule":
                yield dict(query=x, key=x, value=x, g=S((4, 4096, 16), F32), beta=S((4, 4096, 16), dt))
            else:
                yield dict(query=x, key=x, value=x, beta=S((4, 4096, 16), dt), decay=S((4, 4096, 16, d), F32))

    return shapes


def _grouped_matmul(dt):
    for m, k, n, g, _ in GMM_SHAPES:
        for out in (F32, dt):
            yield dict(lhs=S((m, k), dt), rhs=S((g, k, n), dt), group_sizes=S((g,), I32), preferred_element_type=out)


def _state_space_v1(dt):
    for b, s, d, n in ((1, 4096, 4096, 16), (8, 2048, 1536, 16), (1, 4096, 2048, 64)):
        yield dict(
            hidden_states=S((b, s, d), dt), A=S((d, n), F32), B=S((b, s, n), dt), C=S((b, s, n), dt),
            D=S((d,), F32), dt=S((b, s, d), dt),
        )  # fmt: skip


def _mean_pooling(dt):
    yield dict(x=S((262144, 4096), dt), cu_seqlens=S((65,), I32))
    yield dict(x=S((4096, 1024), dt), cu_seqlens=S((9,), I32))


def _recurrent_cell(dt):
    for cell, g, hd in (("lstm", 4, 64), ("gru", 3, 48), ("lstm", 4, 1024)):
        w = dict(w_ih=S((hd, g * hd), dt), w_hh=S((hd, g * hd), dt))
        yield dict(inputs=S((64, 2048, hd), dt), hidden=S((64, hd), dt), weights=w, cell_type=cell)


def _page_attention(dt):
    for d in (64, 128, 256):
        for context in (2048, 32768):
            blocks = context // 16
            yield dict(
                query=S((32, 32, d), dt), key_cache=S((32 * blocks, 16, 8, d), dt),
                value_cache=S((32 * blocks, 16, 8, d), dt), context_lens=S((32,), I32),
                block_tables=S((32, blocks), I32),
            )  # fmt: skip


def _ragged_page_attention(dt):
    """The benchmark's serving steps (decodes, a decode/prefill mix, prefills) at head dims 64 to 256."""
    for d in (64, 128, 256):
        for tokens, seqs, pages_per_seq in ((64, 64, 512), (2108, 64, 512), (16384, 8, 128)):
            yield dict(
                queries=S((tokens, 32, d), dt), kv_pages=S((seqs * pages_per_seq, 16, 16, d), dt),
                context_lens=S((seqs,), I32), block_tables=S((seqs, pages_per_seq), I32),
                query_start_loc=S((seqs + 1,), I32), num_seqs=S((), I32),
            )  # fmt: skip


def _ragged_page_attention_v3(dt):
    """The v2 serving steps over the packed cache (head dim padded to a multiple of 128)."""
    for d in (64, 128, 256):
        pack = 4 // jnp.dtype(dt).itemsize
        for tokens, seqs, pages_per_seq in ((64, 64, 512), (2108, 64, 512), (16384, 8, 128)):
            kv = S((tokens, 8, d), dt)
            yield dict(
                queries=S((tokens, 32, d), dt), keys=kv, values=kv,
                kv_cache=S((seqs * pages_per_seq, 16, 16 // pack, pack, -(-d // 128) * 128), dt),
                kv_lens=S((seqs,), I32), block_tables=S((seqs * pages_per_seq,), I32),
                query_start_loc=S((seqs + 1,), I32), distribution=S((3,), I32),
            )  # fmt: skip


def _unified_attention(dt):
    for d in (64, 128, 256):
        for tokens, seqs, blocks_per_seq in ((64, 64, 512), (2108, 64, 512), (16384, 8, 128)):
            cache = S((seqs * blocks_per_seq, 16, 8, d), dt)
            yield dict(
                queries=S((tokens, 32, d), dt), key_cache=cache, value_cache=cache, kv_lens=S((seqs,), I32),
                block_tables=S((seqs, blocks_per_seq), I32), query_start_loc=S((seqs + 1,), I32),
            )  # fmt: skip


def _prefill_page_attention(dt):
    for d in (64, 128, 256):
        for chunk, pages in ((512, 256), (4096, 2048), (8, 64)):
            cache = S((8, 4 * pages, 16, d), dt)
            yield dict(
                query=S((chunk, 32, d), dt), key_cache=cache, value_cache=cache,
                context_len=S((1,), I32), page_indices=S((pages,), I32),
            )  # fmt: skip


# Realistic shapes of every op a GPU implementation serves (abstract: nothing is allocated).
def _blocksparse_attention(dt):
    for d in (64, 128, 256):
        q = S((2, 16, 4096, d), dt)
        kv = S((2, 4, 4096, d), dt)
        yield dict(query=q, key=kv, value=kv, sliding_window=(1024, 0))


def _native_sparse_attention(dt):
    for d in (64, 128):
        q = S((1, 4096, 16, d), dt)
        kv = S((1, 4096, 1, d), dt)
        yield dict(query=q, key=kv, value=kv, block_indices=S((1, 4096, 1, 16), jnp.int32), block_counts=16)


def _flash_mla_decode(dt):
    """DeepSeek-V3 (512 + 64, 128 heads: one and two query tokens), V2-Lite's 16 heads, and a
    small latent with no rope lanes."""
    for b, sq, h, r, dr, context in ((64, 1, 128, 512, 64, 8192), (32, 2, 128, 512, 64, 4096),
                                     (32, 1, 16, 512, 64, 4096), (8, 1, 32, 256, 0, 2048)):  # fmt: skip
        pages = context // 64
        yield dict(
            query=S((b, sq, h, r + dr), dt), latent_cache=S((b * pages, 64, r + dr), dt),
            context_lens=S((b,), I32), block_tables=S((b, pages), I32), kv_lora_rank=r,
        )  # fmt: skip


def _deepseek_attn(dt):
    """DeepSeek-V3.2 (MLA 512 + 64 over 128 heads, top-2048 of an 8k prefill; a decode step against
    a 32k cache), V2-Lite's 16 heads, and a small latent with no rope lanes."""
    for b, sq, sk, h, hk, r, dr, topk in ((1, 8192, 8192, 128, 128, 512, 64, 2048), (8, 1, 32768, 128, 128, 512, 64, 2048),
                                          (2, 4096, 4096, 16, 16, 512, 64, 2048), (2, 2048, 2048, 32, 8, 256, 0, 512)):  # fmt: skip
        dq = 128 + dr if dr else 128
        kw = dict(
            query=S((b, sq, h, dq), dt), key_value=S((b, sk, r), dt), w_kc=S((r, hk, 128), dt),
            w_vc=S((r, hk, 128), dt), query_index=S((b, sq, 64, 128), dt), key_index=S((b, sk, 128), dt),
            index_weights=S((b, sq, 64), dt), index_topk=topk, causal=True,
        )  # fmt: skip
        if dr:
            kw["b_k"] = S((b, sk, dr), dt)
        yield kw


SHAPES = {
    "deepseek_attn": _deepseek_attn,
    "native_sparse_attention": _native_sparse_attention,
    "flash_attention": _attention,
    "ring_attention": _attention,  # a ring of one here: its blocks run the flash kernels
    "gla_attention": _linear("gla_attention"),
    "lightning_attention": _linear("lightning_attention"),
    "recurrent_attention": _linear("recurrent_attention"),
    "state_space_v2": _linear("state_space_v2"),
    "gated_delta_rule": _delta("gated_delta_rule"),
    "kernel_delta_attention": _delta("kernel_delta_attention"),
    "grouped_matmul": _grouped_matmul,
    "state_space_v1": _state_space_v1,
    "mean_pooling": _mean_pooling,
    "recurrent_cell": _recurrent_cell,
    "page_attention": _page_attention,
    "ragged_page_attention_v2": _ragged_page_attention,
    "ragged_page_attention_v3": _ragged_page_attention_v3,
    "unified_attention": _unified_attention,
    "prefill_page_attention": _prefill_page_attention,
    "blocksparse_attention": _blocksparse_attention,
    "flash_mla_decode": _flash_mla_decode,
}
GPU_PLATFORMS = (Platform.TRITON, Platform.CUDA)


def _gpu_impls():
    return [
        (op, impl)
        for op in sorted({i.op_name for i in kernel_registry.implementations() if i.platform in GPU_PLATFORMS})
        for impl in kernel_registry.implementations(op)
        if impl.platform in GPU_PLATFORMS
    ]


def test_every_gpu_implementation_declares_its_needs():
    impls = _gpu_impls()
    assert impls
    for op, impl in impls:
        assert type(impl).resources is not KernelImpl.resources, f"{impl!r} declares no resources"
        assert op in SHAPES, f"no realistic shapes for {op} here"


@pytest.mark.parametrize("op", sorted(SHAPES))
def test_every_heuristic_config_fits_every_device_profile(op):
    """Each GPU implementation's heuristic config, for every dtype it declares and every shape
    here, resolves on each profile (sm_80, sm_86, sm_89, sm_90, sm_120) without exceeding it
    (``resolve_config`` checks the declared needs and raises ``ValueError`` naming the limit)."""
    impls = [impl for o, impl in _gpu_impls() if o == op]
    checked = []

    def walk(impl, dtype, kw, device):
        # Abstract shapes anywhere in the arguments (recurrent_cell's weights are a dict of them).
        leaves, tree = jax.tree.flatten(kw, is_leaf=lambda v: isinstance(v, S))
        pos = [i for i, v in enumerate(leaves) if isinstance(v, S)]

        def inside(*arrays):  # traced: the abstract shapes become arrays for bind
            full = list(leaves)
            for i, a in zip(pos, arrays, strict=True):
                full[i] = a
            args = bind(op, **jax.tree.unflatten(tree, full))
            runs = impl.available(device) is None and declared_decline(impl, args) is None
            if runs and impl.decline(args, device) is None:  # a decline names what does not fit
                cfg = resolve_config(get_op(op), impl, args, device)
                checked.append((impl.name, dtype, device.compute_capability, cfg))
            return 0

        jax.eval_shape(inside, *[leaves[i] for i in pos])

    for impl in impls:
        for dtype in impl.dtypes or ("bfloat16",):
            for kw in SHAPES[op](jnp.dtype(dtype)):
                for device in PROFILE_DEVICES:
                    try:
                        walk(impl, dtype, kw, device)
                    except ValueError as e:
                        pytest.fail(f"{impl.name} {op} {dtype} on {device.kind}: {e}")
    if impls and any(i.available(PROFILE_DEVICES[3]) is None for i in impls):
        assert checked


@pytest.mark.slow
def test_grouped_matmul_float32_output_runs_one_program_per_tile_where_the_persistent_epilogue_does_not_fit():
    """The default output (float32) at the benchmark shapes on Hopper: where bf16 outputs take the
    persistent 128x256x64 3-stage grid (groups of 512+ rows), a float32 output's epilogue tile
    (131072 B) does not fit beside its operand buffers (147456 B): one program per tile instead."""
    impl = kernel_registry.get("grouped_matmul", platform="triton")
    changed = []
    for shape in GMM_SHAPES:
        bf16 = impl.heuristic_cfg(bind("grouped_matmul", **_gmm_args(*shape, out=jnp.bfloat16)), H200)
        f32 = impl.heuristic_cfg(bind("grouped_matmul", **_gmm_args(*shape)), H200)  # the default output
        for cfg, out in ((bf16, jnp.bfloat16), (f32, jnp.float32)):
            args = bind("grouped_matmul", **_gmm_args(*shape, out=out))
            assert unfit(impl.resources(cfg, args, H200), profile_for(H200)) is None, (shape, out, cfg)
        if bf16 != f32:
            changed.append(shape[:4])
            assert bf16.persistent and not f32.persistent
            assert f32 == GroupedMatmulConfig(**{**bf16.tuning_fields(), "persistent": False})
    assert changed == [(16384, 4096, 2048, 8), (65536, 4096, 1408, 64)]


def test_grouped_matmul_persistent_float32_config_is_refused_naming_the_limit():
    """The configuration that failed at launch (``Shared memory requested (278528 b) exceeds device
    resources (232448 b)``) is now refused before anything is compiled."""
    cfg = GroupedMatmulConfig(
        block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, split_k=1, persistent=True
    )
    kw = _gmm_args(16384, 4096, 2048, 8, "multinomial")
    with pytest.raises(ValueError, match=r"'gmm \(forward\)' needs 278528 B .* sm_90 .* 232448 B"):
        from ejkernel.ops import run_impl

        run_impl(
            kernel_registry.get("grouped_matmul", platform="triton"), bind("grouped_matmul", **kw), cfg, device=H200
        )


# -- the declarations against Triton's compiled allocation ------------------------------------------


def compiled(test):
    """A test that compiles Triton kernels for sm_90/sm_80 (seconds each on 2 CPU cores): slow, and
    not under Triton's interpreter."""
    no_interpreter = pytest.mark.skipif(
        os.environ.get("TRITON_INTERPRET") == "1", reason="compiles for sm_90/sm_80: Triton without its interpreter"
    )
    return pytest.mark.slow(no_interpreter(test))


def _check_declared_bounds_compiled(op, impl, kw, cfg, capabilities=(90, 80), grads=True):
    """Every kernel the call launches, compiled for each capability: the declared need of the
    kernel (the largest of the implementation's needs) is at least what Triton allocates."""
    from ejkernel_triton._compile import compiled_shared, traced_launches

    args = bind(op, **kw)
    out = []
    for cap in capabilities:
        device = DeviceInfo(platform="gpu", kind="test", compute_capability=(cap // 10, cap % 10))
        full = (
            cfg.filled_from(impl.heuristic_cfg(args, device)) if cfg is not None else impl.heuristic_cfg(args, device)
        )
        declared = max(n.shared_memory for n in impl.resources(full, args, device))
        for rec in traced_launches(impl, op, kw, cfg, device, grads=grads):
            shared = compiled_shared(rec, cap)
            assert shared <= declared, (cap, rec["name"], rec["constexprs"], shared, declared)
            out.append((cap, rec["name"], shared, declared))
    return out


def _gmm_cfg(bm, bn, bk, w, s, persistent=False, split=1, tgmm=None):
    return GroupedMatmulConfig(
        block_m=bm, block_n=bn, block_k=bk, num_warps=w, num_stages=s, split_k=split, persistent=persistent,
        tgmm_num_stages=tgmm,
    )  # fmt: skip


_GMM_SMALL = (2048, 512, 1024, 4, "multinomial")


def _sampled(cases, name):
    """The first case of each kernel family in the default run; every case under ``-m full``
    (compiling one Triton kernel on 2 CPU cores takes seconds; the gradients compile several)."""
    return [pytest.param(*c, marks=() if i == 0 else pytest.mark.full, id=f"{name}{i}") for i, c in enumerate(cases)]


@compiled
def test_grouped_matmul_persistent_float32_epilogue_compiles_to_its_declared_need():
    """The configuration that failed at launch: the persistent epilogue (float32) beside three
    operand stages, 278528 B as declared and as Triton allocates."""
    impl = kernel_registry.get("grouped_matmul", platform="triton")
    seen = _check_declared_bounds_compiled(
        "grouped_matmul", impl, _gmm_args(*_GMM_SMALL), _gmm_cfg(128, 256, 64, 8, 3, persistent=True), grads=False
    )
    assert (90, "ejkernel_gmm", 278528, 278528) in seen


@compiled
@pytest.mark.parametrize(
    ("kw", "cfg"),
    _sampled(
        [
            (dict(out=jnp.bfloat16), _gmm_cfg(128, 256, 64, 8, 3, persistent=True)),
            (dict(out=jnp.bfloat16), _gmm_cfg(128, 256, 64, 8, 4, persistent=True)),  # 224 KiB
            (dict(out=jnp.bfloat16), _gmm_cfg(64, 256, 64, 4, 3, persistent=True)),
            ({}, _gmm_cfg(128, 256, 64, 8, 4, tgmm=3)),
            ({}, _gmm_cfg(128, 128, 64, 4, 3, persistent=True)),
            (dict(dtype=jnp.float32), _gmm_cfg(64, 128, 32, 4, 3)),
            (dict(out=jnp.bfloat16), _gmm_cfg(64, 64, 64, 4, 1, split=2)),
        ],
        "gmm",
    ),
)
def test_grouped_matmul_declared_shared_memory_bounds_the_compiled_kernels(kw, cfg):
    impl = kernel_registry.get("grouped_matmul", platform="triton")
    _check_declared_bounds_compiled("grouped_matmul", impl, _gmm_args(*_GMM_SMALL, **kw), cfg)


def test_grouped_matmul_needs_of_the_three_kernels():
    """Forward (float32 output, persistent: operands and epilogue side by side), dlhs (16-bit
    output) and tgmm (never persistent: the larger of operands and epilogue)."""
    from ejkernel_triton.grouped_matmul import heuristics as H

    c = GroupedMatmulConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, split_k=1, persistent=True)
    fwd, dlhs, tgmm = (n.shared_memory for n in H.needs(c, 2, 4))
    assert fwd == 3 * (128 + 256) * 64 * 2 + 128 * 256 * 4 == 278528
    assert dlhs == 3 * (128 + 256) * 64 * 2 + 128 * 128 * 2  # 16-bit: 128 columns at a time
    assert tgmm == int(np.prod((3, 384, 64, 2)))


def _qkv(d, dtype=jnp.bfloat16, s=256):
    x = jnp.zeros((1, s, 2, d), dtype)
    return dict(query=x, key=x, value=x)


def _flash_cases():
    from ejkernel.ops import BwdParams, FwdParams
    from ejkernel.ops.flash_attention import FlashAttentionConfig

    return [
        (dict(_qkv(128), causal=True), None),
        (_qkv(128), None),  # Hopper: the warp-specialized TMA forward, its output tile staged
        (_qkv(64), None),  # Hopper: three stages of 128x64 tiles
        (_qkv(128), FlashAttentionConfig(fwd_params=FwdParams(128, 128, 8, 3))),
        (dict(_qkv(64, jnp.float32), causal=True), None),
        (_qkv(256), FlashAttentionConfig(bwd_params=BwdParams(32, 64, 4, 2))),  # Hopper: 8 warps, 193 KiB
    ]


@compiled
@pytest.mark.parametrize("cap", [90, 80])
@pytest.mark.parametrize(("kw", "cfg"), _sampled(_flash_cases(), "flash"))
def test_flash_attention_declared_shared_memory_bounds_the_compiled_kernels(monkeypatch, kw, cfg, cap):
    from ejkernel_triton.flash_attention import _spec

    impl = kernel_registry.get("flash_attention", platform="triton")
    # The TMA kernels are chosen by the arrays' device: pretend it is the compiled-for one.
    monkeypatch.setattr(_spec, "_capability", lambda a: (cap // 10, cap % 10))
    _check_declared_bounds_compiled("flash_attention", impl, kw, cfg, capabilities=(cap,))


def _ssm1_cases():
    from ejkernel.ops.state_space_v1 import StateSpaceV1Config

    b, s, d = 1, 256, 512
    out = []
    for n, dtype, cfg in (
        (16, jnp.bfloat16, None),
        (16, jnp.float32, StateSpaceV1Config(block_d=32, block_e=32, num_warps=8, num_stages=2)),
        (64, jnp.bfloat16, StateSpaceV1Config(block_d=16, block_e=32, num_warps=4, num_stages=2)),
    ):
        kw = dict(
            hidden_states=jnp.zeros((b, s, d), dtype), A=-jnp.ones((d, n)), B=jnp.zeros((b, s, n), dtype),
            C=jnp.zeros((b, s, n), dtype), D=jnp.ones((d,)), dt=jnp.zeros((b, s, d), dtype),
        )  # fmt: skip
        out.append(("state_space_v1", kw, cfg))
    return out


def _pooling_cases():
    from ejkernel.ops.mean_pooling import MeanPoolingConfig

    cu = jnp.asarray(np.array([0, 700, 2048], np.int32))
    return [
        ("mean_pooling", dict(x=jnp.zeros((2048, 1024), dtype), cu_seqlens=cu), cfg)
        for dtype, cfg in (
            (jnp.bfloat16, None),
            (jnp.float32, MeanPoolingConfig(block_size=64, block_dim=512, split_size=512, num_warps=8, num_stages=3)),
        )
    ]


@compiled
@pytest.mark.parametrize(("op", "kw", "cfg"), _sampled(_ssm1_cases(), "ssm") + _sampled(_pooling_cases(), "pool"))
def test_state_space_v1_and_mean_pooling_declared_shared_memory_bounds_the_compiled_kernels(op, kw, cfg):
    _check_declared_bounds_compiled(op, kernel_registry.get(op, platform="triton"), kw, cfg)


def _linear_case(op, d, dtype, chunk, bv, w):
    from ejkernel.ops.op import op_class

    x = jnp.zeros((1, 256, 2, d), dtype)
    kw = dict(query=x, key=x, value=x)
    if op == "lightning_attention":
        kw.update(layer_idx=5, num_layers=24)
    else:
        kw.update(g=jnp.zeros((1, 256, 2, d), jnp.float32))
    return op, kw, op_class(op).config_cls(chunk_size=chunk, block_v=bv, num_warps=w, num_stages=2)


def _delta_case(op, d, dtype, bv, w):
    from ejkernel.ops.op import op_class

    x = jnp.zeros((1, 256, 2, d), dtype)
    if op == "gated_delta_rule":
        kw = dict(query=x, key=x, value=x, g=jnp.zeros((1, 256, 2), jnp.float32), beta=jnp.zeros((1, 256, 2), dtype))
    else:
        kw = dict(
            query=x, key=x, value=x, beta=jnp.zeros((1, 256, 2), dtype), decay=jnp.zeros((1, 256, 2, d), jnp.float32)
        )
    return op, kw, op_class(op).config_cls(chunk_size=64, chunked=True, block_v=bv, num_warps=w, num_stages=2)


def _linear_delta_cases():
    linear = [
        _linear_case("lightning_attention", 256, jnp.bfloat16, 16, 64, 4),
        _linear_case("lightning_attention", 64, jnp.float32, 128, 128, 8),
        _linear_case("gla_attention", 128, jnp.bfloat16, 32, 32, 8),
    ]
    delta = [
        _delta_case("gated_delta_rule", 256, jnp.bfloat16, 16, 4),
        _delta_case("kernel_delta_attention", 64, jnp.float32, 32, 8),
        _delta_case("gated_delta_rule", 128, jnp.float32, 32, 4),
    ]
    return _sampled(linear, "linear") + _sampled(delta, "delta")


@compiled
@pytest.mark.parametrize(("op", "kw", "cfg"), _linear_delta_cases())
def test_linear_and_delta_declared_shared_memory_bounds_the_compiled_kernels(op, kw, cfg):
    """The calibrated scales (``_linear.resources``, ``_delta.resources``) at configs of the
    heuristics' fallbacks and of the autotuning spaces, 16- and 32-bit, head dims 64 to 256."""
    _check_declared_bounds_compiled(op, kernel_registry.get(op, platform="triton"), kw, cfg, capabilities=(90, 86))


def _paged_cases():
    from ejkernel.ops.page_attention import PageAttentionConfig
    from ejkernel.ops.ragged_page_attention_v2 import RaggedPageAttentionv2Config

    def ragged(tokens, seqs, d, dtype=jnp.bfloat16, hk=8, g=4):
        return dict(
            queries=jnp.zeros((tokens, hk * g, d), dtype), kv_pages=jnp.zeros((64, 16, 2 * hk, d), dtype),
            context_lens=jnp.zeros((seqs,), jnp.int32), block_tables=jnp.zeros((seqs, 64), jnp.int32),
            query_start_loc=jnp.zeros((seqs + 1,), jnp.int32), num_seqs=jnp.int32(seqs),
        )  # fmt: skip

    def paged(d, dtype=jnp.bfloat16, layout="blocks_tokens_heads"):
        cache = jnp.zeros((64, 8, 16, d) if layout == "blocks_heads_tokens" else (64, 16, 8, d), dtype)
        return dict(
            query=jnp.zeros((8, 32, d), dtype), key_cache=cache, value_cache=cache,
            context_lens=jnp.zeros((8,), jnp.int32), block_tables=jnp.zeros((8, 8), jnp.int32), cache_layout=layout,
        )  # fmt: skip

    rpa = "ragged_page_attention_v2"
    return [
        (rpa, ragged(256, 8, 128), None),
        (rpa, ragged(256, 8, 128, jnp.float32), None),
        (rpa, ragged(256, 8, 64), RaggedPageAttentionv2Config(num_kv_pages_per_block=8, num_stages=4)),
        (rpa, ragged(256, 8, 256, hk=2, g=8), None),
        # 128-row prefill tiles with 4 warps (Hopper's default takes 256 rows and 8 warps).
        (rpa, ragged(256, 8, 128), RaggedPageAttentionv2Config(num_queries_per_block=32, num_warps=4, num_stages=3)),
        ("page_attention", paged(128), None),
        ("page_attention", paged(64, jnp.float32, "blocks_heads_tokens"), PageAttentionConfig(tokens_per_block=128)),
    ]


@compiled
@pytest.mark.parametrize(("op", "kw", "cfg"), _sampled(_paged_cases(), "paged"))
def test_paged_attention_declared_shared_memory_bounds_the_compiled_kernels(op, kw, cfg):
    """The paged kernel (both ops): bf16 and float32 (three-pass products), long key steps with
    4 stages, head dim 256 with 8-head groups, either cache layout."""
    _check_declared_bounds_compiled(op, kernel_registry.get(op, platform="triton"), kw, cfg, grads=False)


def _flash_mla_decode_cases():
    from ejkernel.ops.flash_mla_decode import FlashMLADecodeConfig

    def kw(b, h, r, dr, dtype=jnp.bfloat16, sq=1, context=512):
        pages = context // 64
        return dict(
            query=jnp.zeros((b, sq, h, r + dr), dtype), latent_cache=jnp.zeros((b * pages, 64, r + dr), dtype),
            context_lens=jnp.zeros((b,), jnp.int32), block_tables=jnp.zeros((b, pages), jnp.int32), kv_lora_rank=r,
        )  # fmt: skip

    op = "flash_mla_decode"
    return [
        (op, kw(64, 128, 512, 64), None),  # DeepSeek-V3: 64 rows, 64-token steps, 2 stages (221184 B on sm_90)
        (op, kw(4, 128, 512, 64), FlashMLADecodeConfig(block_n=32, num_stages=3)),
        (op, kw(4, 16, 64, 64, jnp.float32), None),  # the widest float32 latent declared
        (op, kw(4, 32, 256, 0, sq=2), FlashMLADecodeConfig(block_h=32, num_splits=4)),
    ]


@compiled
@pytest.mark.parametrize(("op", "kw", "cfg"), _sampled(_flash_mla_decode_cases(), "mla"))
def test_flash_mla_decode_declared_shared_memory_bounds_the_compiled_kernel(op, kw, cfg):
    """DeepSeek widths (the resident 64-row query tile beside the latent tiles), float32 (three-pass
    products), no rope lanes with two query tokens and several splits."""
    _check_declared_bounds_compiled(op, kernel_registry.get(op, platform="triton"), kw, cfg, grads=False)


def _blocksparse_cases():
    from ejkernel.ops import BwdParams, FwdParams
    from ejkernel.ops.blocksparse_attention import BlockSparseAttentionConfig
    from ejkernel.types import MaskInfo

    out = []
    for d, dtype, cfg in (
        (128, jnp.bfloat16, None),
        (256, jnp.bfloat16, None),
        (64, jnp.float32, BlockSparseAttentionConfig(
            fwd_params=FwdParams(q_blocksize=64, kv_blocksize=64, num_warps=4, num_stages=2),
            bwd_params=BwdParams(q_blocksize=32, kv_blocksize=64, num_warps=4, num_stages=2),
        )),
    ):  # fmt: skip
        q = jnp.zeros((1, 4, 512, d), dtype)
        kv = jnp.zeros((1, 2, 512, d), dtype)
        seg = jnp.asarray(np.repeat(np.arange(4, dtype=np.int32), 128)[None])
        mi = MaskInfo.from_segments(seg)
        out.append(
            ("blocksparse_attention", dict(query=q, key=kv, value=kv, sliding_window=(100, 0), mask_info=mi), cfg)
        )
    return out


@compiled
@pytest.mark.parametrize(("op", "kw", "cfg"), _sampled(_blocksparse_cases(), "bsa"))
def test_blocksparse_attention_declared_shared_memory_bounds_the_compiled_kernels(op, kw, cfg):
    _check_declared_bounds_compiled(op, kernel_registry.get(op, platform="triton"), kw, cfg)


def _recurrent_cell_cases():
    from ejkernel.ops.recurrent_cell import RecurrentCellConfig

    def kw(cell, g, hd, dtype):
        w = dict(w_ih=jnp.zeros((32, g * hd), dtype), w_hh=jnp.zeros((hd, g * hd), dtype))
        return dict(inputs=jnp.zeros((64, 8, 32), dtype), hidden=jnp.zeros((64, hd), dtype), weights=w, cell_type=cell)

    streamed = RecurrentCellConfig(block_batch=64, block_hidden=128, num_warps=8)
    return [
        ("recurrent_cell", kw("lstm", 4, 64, jnp.float32), None),  # resident: every gate's tile
        ("recurrent_cell", kw("gru", 3, 48, jnp.bfloat16), None),
        ("recurrent_cell", kw("lstm", 4, 256, jnp.float32), streamed),
        ("recurrent_cell", kw("lstm", 4, 1024, jnp.bfloat16), None),
    ]


@compiled
@pytest.mark.parametrize(("op", "kw", "cfg"), _sampled(_recurrent_cell_cases(), "rnn"))
def test_recurrent_cell_declared_shared_memory_bounds_the_compiled_kernel(op, kw, cfg):
    # The backward is XLA's: only the forward kernel compiles.
    _check_declared_bounds_compiled(op, kernel_registry.get(op, platform="triton"), kw, cfg, grads=False)


def _deepseek_attn_cases():
    from ejkernel.ops.deepseek_attn import DeepSeekAttnConfig

    def kw(h, hk, r, dr, dtype=jnp.bfloat16, s=256, topk=128):
        out = dict(
            query=jnp.zeros((1, s, h, 128 + dr), dtype), key_value=jnp.zeros((1, s, r), dtype),
            w_kc=jnp.zeros((r, hk, 128), dtype), w_vc=jnp.zeros((r, hk, 128), dtype),
            query_index=jnp.zeros((1, s, 4, 32), dtype), key_index=jnp.zeros((1, s, 32), dtype),
            index_weights=jnp.zeros((1, s, 4), dtype), index_topk=topk, causal=True,
        )  # fmt: skip
        if dr:
            out["b_k"] = jnp.zeros((1, s, dr), dtype)
        return out

    op = "deepseek_attn"
    return [
        (op, kw(128, 128, 512, 64), None),  # DeepSeek-V3.2: 64 heads a program, 32-key steps, 3 stages on sm_90
        (op, kw(16, 16, 512, 64), DeepSeekAttnConfig(block_k=64, num_stages=2)),
        (op, kw(16, 4, 64, 64, jnp.float32), None),  # the widest float32 latent declared
        (op, kw(32, 8, 256, 0), DeepSeekAttnConfig(block_q=32)),
    ]


@compiled
@pytest.mark.parametrize(("op", "kw", "cfg"), _sampled(_deepseek_attn_cases(), "dsa"))
def test_deepseek_attn_declared_shared_memory_bounds_the_compiled_kernel(op, kw, cfg):
    """DeepSeek widths with 64 and 16 heads a program, float32 (three-pass products), no rope lanes."""
    _check_declared_bounds_compiled(op, kernel_registry.get(op, platform="triton"), kw, cfg, grads=False)
