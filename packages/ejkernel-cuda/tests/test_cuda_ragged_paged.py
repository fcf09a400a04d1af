"""The CUDA ragged paged ops (``ragged_page_attention_v2``/``v3``): decode-only steps run the paged
decode over the interleaved cache, the other steps are handed on (``run_next``) under one
``lax.cond``.

On any machine the step's logic (which rows decode, the rows it writes back, the hand-on branch)
runs with the FFI call replaced by the XLA ``page_attention`` over the cache's key and value
halves; on an NVIDIA GPU the real kernel runs against the op's reference. The shared conformance
cases (tests/ops/serving) run these implementations too on a GPU.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.ops import bind, kernel_registry
from ejkernel.ops.ragged_page_attention_v2.cases import RaggedPageCase
from ejkernel.ops.ragged_page_attention_v2.reference import ragged_page_attention_v2_reference
from ejkernel.ops.ragged_page_attention_v3.kv_cache import ragged_page_attention_v3_pack_cache
from ejkernel.ops.ragged_page_attention_v3.reference import ragged_page_attention_v3_reference
from ejkernel_cuda.ragged_page_attention_v2 import impl as v2_impl
from ejkernel_cuda.ragged_page_attention_v2.impl import CudaRaggedPageAttentionv2
from ejkernel_cuda.ragged_page_attention_v3 import CudaRaggedPageAttentionv3
from ejkernel_cuda.ragged_page_attention_v3 import impl as v3_impl

ON_GPU = jax.default_backend() == "gpu"

CASES = [
    RaggedPageCase("decode-only", seqs=((1, 40), (1, 7), (1, 64), (1, 1)), h=8, hk=2, d=64, page_size=8),
    RaggedPageCase("decode-padded", seqs=((1, 19), (0, 9), (1, 30)), max_num_seqs=5, pad_tokens=3, d=64),
    RaggedPageCase("mixed", seqs=((1, 17), (5, 40), (1, 1), (12, 12)), d=64),
    RaggedPageCase("features", seqs=((1, 50), (1, 23)), h=8, hk=2, d=64, window=(9, 0), sinks=2, soft_cap=5.0),
]


def _emulated_decode(q, k_cache, v_cache, lens, tables, sinks, *, scale, soft_cap, window_left, **kw):
    assert kw["kv_interleaved"] and k_cache is v_cache
    d = q.shape[-1]
    k, v = k_cache[:, :, 0::2, :d], k_cache[:, :, 1::2, :d]
    window = None if window_left is None else (window_left, 0)
    return ejkernel.page_attention(
        q, k, v, lens, tables, softmax_scale=scale, logits_soft_cap=soft_cap, sliding_window=window,
        softmax_aux=sinks, platform="xla",
    )  # fmt: skip


def _one_path(case, monkeypatch):
    """Emulate the decode, and poison (NaN) the path the step must not take: both are traced
    under ``lax.cond``, but a decode-only step must not hand on and a step with a prefill must
    not use the decode."""
    if all(q <= 1 for q, _ in case.seqs):

        def no_hand_on(impl, op, args):
            return jnp.full_like(args.queries, jnp.nan)

        monkeypatch.setattr(v2_impl, "decode", _emulated_decode)
        monkeypatch.setattr(v2_impl, "run_next", no_hand_on)
        monkeypatch.setattr(v3_impl, "run_next", no_hand_on)
    else:
        monkeypatch.setattr(v2_impl, "decode", lambda q, *a, **k: jnp.full_like(q, jnp.nan))


def _check(out, ref, dtype):
    tol = 2e-5 if dtype == "float32" else 3e-2
    np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(ref, np.float32), atol=tol, rtol=tol)


def _v3_kwargs(case, seed=0):
    kw = case.inputs(seed)
    kv = kw.pop("kv_pages")
    q = kw.pop("queries")
    rng = np.random.default_rng(seed + 1)
    t = q.shape[0]
    keys, values = (jnp.asarray(rng.standard_normal((t, case.hk, case.d)), q.dtype) for _ in range(2))
    cache = ragged_page_attention_v3_pack_cache(kv[:, :, 0::2], kv[:, :, 1::2])
    n = len(case.seqs)
    dist = jnp.asarray([0, 0, n], jnp.int32)
    return dict(
        queries=q, keys=keys, values=values, kv_cache=cache, kv_lens=kw["context_lens"],
        block_tables=kw["block_tables"].reshape(-1), query_start_loc=kw["query_start_loc"], distribution=dist,
        softmax_aux=kw.get("softmax_aux"), logits_soft_cap=kw["logits_soft_cap"], sliding_window=kw["sliding_window"],
        softmax_scale=case.d**-0.5,
    )  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_v2_step_logic_with_the_decode_emulated(case, monkeypatch):
    """Decode-only steps write each live sequence's one row and zeros elsewhere; steps with a
    prefill give the handed-on implementation's result (XLA here)."""
    _one_path(case, monkeypatch)
    impl = CudaRaggedPageAttentionv2()
    impl.op_name = "ragged_page_attention_v2"
    impl.plugin = "cuda"
    kw = case.inputs()
    args = bind("ragged_page_attention_v2", **kw)
    out = jax.jit(lambda a: impl.run(a, impl.test_configs["splits3"]))(args)
    ref = ragged_page_attention_v2_reference(**kw)
    _check(out, ref, case.dtype)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_v3_step_logic_with_the_decode_emulated(case, monkeypatch):
    _one_path(case, monkeypatch)
    impl = CudaRaggedPageAttentionv3()
    impl.op_name = "ragged_page_attention_v3"
    impl.plugin = "cuda"
    # The packed cache pads the head dim to 128 lanes; this implementation takes unpadded ones.
    case = dataclasses.replace(case, d=128)
    kw = _v3_kwargs(case)
    args = bind("ragged_page_attention_v3", **kw)
    out, cache = jax.jit(lambda a: impl.run(a, impl.test_configs["splits3"]))(args)
    ref_out, ref_cache = ragged_page_attention_v3_reference(**kw)
    _check(out, ref_out, case.dtype)
    np.testing.assert_array_equal(np.asarray(cache), np.asarray(ref_cache))


def test_v3_declines_a_padded_head_dim():
    case = RaggedPageCase("d32", seqs=((1, 9),), d=32)
    args = bind("ragged_page_attention_v3", **_v3_kwargs(case))
    impl = kernel_registry.get("ragged_page_attention_v3", platform="cuda")
    assert "head_dim_padded" in impl.decline(args, None)


GPU_CASES = [
    RaggedPageCase("decodes", seqs=((1, 2048),) * 12 + ((1, 17), (1, 1)), h=32, hk=8, d=128, page_size=16,
                   dtype="bfloat16"),
    RaggedPageCase("decodes-padded", seqs=((1, 3000), (0, 64), (1, 900)), max_num_seqs=6, pad_tokens=5, h=16, hk=4,
                   d=128, page_size=16, dtype="bfloat16"),
    RaggedPageCase("mixed", seqs=((1, 1500),) * 6 + ((256, 2048), (3, 700)), h=32, hk=8, d=128, page_size=16,
                   dtype="bfloat16"),
    RaggedPageCase("float32-window-sinks", seqs=((1, 1000), (1, 333)), h=8, hk=2, d=64, window=(100, 0), sinks=1),
]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: c.name)
def test_gpu_v2_and_v3_against_the_reference_eagerly_and_jitted(case):
    kw = case.inputs()
    ref = ragged_page_attention_v2_reference(**kw)
    arrays = {k: v for k, v in kw.items() if isinstance(v, jax.Array)}
    on_cuda = functools.partial(ejkernel.ragged_page_attention_v2, platform="cuda", **{
        k: v for k, v in kw.items() if k not in arrays
    })  # fmt: skip
    for call in (on_cuda, jax.jit(on_cuda)):
        _check(call(**arrays), ref, case.dtype)
    kw3 = _v3_kwargs(dataclasses.replace(case, d=128))  # an unpadded head dim (the decline above)
    ref_out, ref_cache = ragged_page_attention_v3_reference(**kw3)
    out, cache = ejkernel.ragged_page_attention_v3(**kw3, platform="cuda")
    _check(out, ref_out, case.dtype)
    np.testing.assert_array_equal(np.asarray(cache, np.float32), np.asarray(ref_cache, np.float32))
