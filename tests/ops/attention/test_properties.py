"""Properties of the attention ops beyond matching the reference on fixed cases."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.ops.families.attention_math import dropout_keep_mask
from ejkernel.testing import attention_reference

DENSE_OPS = [ejkernel.flash_attention, ejkernel.scaled_dot_product_attention]
SMALL_TILES = ejkernel.FlashAttentionConfig(
    fwd_params=ejkernel.FwdParams(q_blocksize=16, kv_blocksize=16),
    bwd_params=ejkernel.BwdParams(q_blocksize=16, kv_blocksize=16),
)


def qkv(rng, b=1, sq=40, sk=40, h=4, hk=2, d=32, dtype=jnp.float32):
    return (
        jnp.asarray(rng.standard_normal((b, sq, h, d)), dtype),
        jnp.asarray(rng.standard_normal((b, sk, hk, d)), dtype),
        jnp.asarray(rng.standard_normal((b, sk, hk, d)), dtype),
    )


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
def test_dropout_mask_statistics(rate):
    """The keep mask drops a fraction ``rate`` of weights, independently of position."""
    i = jnp.arange(512)[:, None]
    j = jnp.arange(512)[None, :]
    keep = np.asarray(dropout_keep_mask(jnp.uint32(7), 3, i, j, rate))
    n = keep.size
    sigma = np.sqrt(rate * (1 - rate) / n)
    assert abs((1 - keep.mean()) - rate) < 5 * sigma
    # Rows and columns are not correlated with position (each row's fraction near the rate).
    per_row = 1 - keep.mean(axis=1)
    assert abs(per_row.mean() - rate) < 5 * sigma * np.sqrt(512)
    assert per_row.std() < 5 * np.sqrt(rate * (1 - rate) / 512)
    # Another seed (or head), an independent mask: they disagree on 2·rate·(1 - rate) of entries.
    for other in (dropout_keep_mask(jnp.uint32(8), 3, i, j, rate), dropout_keep_mask(jnp.uint32(7), 4, i, j, rate)):
        assert abs((keep != np.asarray(other)).mean() - 2 * rate * (1 - rate)) < 0.01


@pytest.mark.parametrize("op", DENSE_OPS, ids=lambda f: f.__name__)
def test_dropout_is_unbiased_and_deterministic(op, rng):
    q, k, v = qkv(rng, sq=16, sk=24)
    kwargs = {"dropout_prob": 0.3, "causal": True}

    @jax.jit
    def with_seed(seed):
        return op(q, k, v, dropout_seed=seed, **kwargs)

    a = with_seed(jnp.uint32(5))
    b = with_seed(jnp.uint32(5))
    c = with_seed(jnp.uint32(6))
    assert np.array_equal(np.asarray(a), np.asarray(b)), "same seed must give the same output"
    assert not np.allclose(np.asarray(a), np.asarray(c)), "another seed must give another mask"
    # E[dropout(P)] = P: the mean over many seeds approaches the output without dropout.
    mean = jnp.mean(jax.vmap(with_seed)(jnp.arange(400, dtype=jnp.uint32)), axis=0)
    plain = op(q, k, v, causal=True)
    assert float(jnp.max(jnp.abs(mean - plain))) < 0.15
    assert float(jnp.mean(jnp.abs(mean - plain))) < 0.03


def test_dropout_without_seed_is_rejected_under_jit(rng):
    q, k, v = qkv(rng)
    with pytest.raises(ValueError, match="dropout_seed"):
        jax.jit(lambda q: ejkernel.flash_attention(q, k, v, dropout_prob=0.1))(q)


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [None, SMALL_TILES], ids=["heuristic", "small-tiles"])
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_equals_loop_of_per_sequence_calls(cfg, causal, rng):
    lens_q = [7, 1, 30, 12]
    lens_k = [9, 4, 30, 20]
    q = jnp.asarray(rng.standard_normal((1, sum(lens_q) + 3, 4, 32)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((1, sum(lens_k) + 5, 2, 32)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((1, sum(lens_k) + 5, 2, 32)), jnp.float32)
    cu_q = jnp.asarray(np.cumsum([0, *lens_q]), jnp.int32)
    cu_k = jnp.asarray(np.cumsum([0, *lens_k]), jnp.int32)
    packed = ejkernel.flash_attention(q, k, v, cum_seqlens_q=cu_q, cum_seqlens_k=cu_k, causal=causal, cfg=cfg)
    for s in range(len(lens_q)):
        q0, q1, k0, k1 = int(cu_q[s]), int(cu_q[s + 1]), int(cu_k[s]), int(cu_k[s + 1])
        single = ejkernel.flash_attention(q[:, q0:q1], k[:, k0:k1], v[:, k0:k1], causal=causal, cfg=cfg)
        np.testing.assert_allclose(np.asarray(packed[:, q0:q1]), np.asarray(single), atol=3e-6, rtol=1e-5)
    assert np.all(np.asarray(packed[:, int(cu_q[-1]) :]) == 0), "tokens past the last sequence are padding"


@pytest.mark.slow
@pytest.mark.parametrize("op", DENSE_OPS, ids=lambda f: f.__name__)
def test_jit_vmap_grad(op, rng):
    q, k, v = qkv(rng, b=1, sq=24, sk=24)
    qs, ks, vs = (jnp.stack([x, x * 0.5 + 0.1]) for x in (q, k, v))  # a leading vmap axis

    def loss(q, k, v):
        return jnp.sum(op(q, k, v, causal=True) ** 2)

    vmapped = jax.jit(jax.vmap(lambda a, b, c: op(a, b, c, causal=True)))(qs, ks, vs)
    for n in range(2):
        np.testing.assert_allclose(
            np.asarray(vmapped[n]), np.asarray(op(qs[n], ks[n], vs[n], causal=True)), atol=2e-6, rtol=1e-5
        )
    g = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)
    g_ref = jax.grad(lambda a, b, c: jnp.sum(attention_reference(a, b, c, causal=True) ** 2), argnums=(0, 1, 2))(
        q, k, v
    )
    for x, y in zip(g, g_ref, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=2e-4, rtol=2e-4)
    gv = jax.vmap(jax.grad(loss))(qs, ks, vs)
    np.testing.assert_allclose(np.asarray(gv[0]), np.asarray(g[0]), atol=2e-5, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [None, SMALL_TILES], ids=["heuristic", "small-tiles"])
def test_bitwise_deterministic(cfg, rng):
    q, k, v = qkv(rng, sq=50, sk=70)
    bias = jnp.asarray(rng.standard_normal((1, 4, 50, 70)), jnp.float32)

    def run():
        out, grads = jax.value_and_grad(
            lambda q, k, v, b: jnp.sum(ejkernel.flash_attention(q, k, v, b, causal=True, cfg=cfg) ** 2),
            argnums=(0, 1, 2, 3),
        )(q, k, v, bias)
        return [np.asarray(x) for x in (out, *grads)]

    for a, b in zip(run(), run(), strict=True):
        assert np.array_equal(a, b)


def test_fully_masked_rows_have_finite_zero_gradients(rng):
    q, k, v = qkv(rng, sq=20, sk=8)
    # causal with seq_q > seq_k: the first 12 rows see no key at all.
    out, vjp = jax.vjp(lambda q, k, v: ejkernel.flash_attention(q, k, v, causal=True, cfg=SMALL_TILES), q, k, v)
    assert np.all(np.asarray(out[:, :12]) == 0)
    dq, dk, dv = vjp(jnp.ones_like(out))
    for g in (dq, dk, dv):
        assert np.all(np.isfinite(np.asarray(g)))
    assert np.all(np.asarray(dq[:, :12]) == 0)


def test_bias_with_minus_inf_masks_like_a_mask(rng):
    """A bias of -inf is a common way to mask: it must behave like the mask (no NaN)."""
    q, k, v = qkv(rng, sq=16, sk=16, h=2, hk=2)
    allowed = rng.random((1, 2, 16, 16)) < 0.6
    allowed[:, :, 3] = False
    bias = jnp.where(allowed, 0.0, -jnp.inf)
    out = ejkernel.flash_attention(q, k, v, bias, cfg=SMALL_TILES)
    ref = ejkernel.flash_attention(q, k, v, mask_info=ejkernel.MaskInfo.from_attention_mask(allowed), cfg=SMALL_TILES)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-6)
    g = jax.grad(lambda q: jnp.sum(ejkernel.flash_attention(q, k, v, bias, cfg=SMALL_TILES)))(q)
    assert np.all(np.isfinite(np.asarray(g)))
