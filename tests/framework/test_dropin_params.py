"""Earlier ejkernel releases' parameters (../shared/spec/signatures.md) on the ops of this library:
positional arrays in the documented order, renamed parameters, options that are no-ops here (and
the errors for values that would not be), config hints, both page-cache layouts, dropout seeds."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.ops import record_dispatches
from ejkernel.testing.references import attention_reference, page_attention_reference


def normal(seed, shape):
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32)


def close(a, b, tol=2e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


@pytest.fixture
def qkv():
    return normal(0, (1, 37, 4, 16)), normal(1, (1, 37, 2, 16)), normal(2, (1, 37, 2, 16))


@pytest.mark.slow
def test_arrays_by_position_in_the_documented_order(qkv):
    q, k, v = qkv
    bias = normal(3, (1, 4, 37, 37))
    cu = jnp.array([0, 11, 30], jnp.int32)
    aux = normal(4, (4,))
    op = ejkernel.flash_attention
    by_name = op(q, k, v, bias=bias, cum_seqlens_q=cu, cum_seqlens_k=cu, softmax_aux=aux, causal=True)
    by_position = op(q, k, v, bias, cu, cu, aux, causal=True)
    close(by_position, by_name, 0)
    ref = attention_reference(q, k, v, bias=bias, cum_seqlens_q=cu, cum_seqlens_k=cu, softmax_aux=aux, causal=True)
    close(by_position, ref, 1e-4)
    # scaled_dot_product_attention: the same boundaries under the name cu_seqlens_q/k.
    sdpa = ejkernel.scaled_dot_product_attention(
        q, k, v, bias, softmax_aux=aux, cu_seqlens_q=cu, cu_seqlens_k=cu, causal=True
    )
    close(sdpa, ref, 1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_cum_seqlens_are_per_example_lengths(causal):
    """Earlier releases passed ``cum_seqlens_q/k`` to ``jax.nn.dot_product_attention`` as
    ``query_seq_lengths`` / ``key_value_seq_lengths``: the same call gives the same output."""
    q, k, v = normal(0, (3, 20, 4, 16)), normal(1, (3, 20, 2, 16)), normal(2, (3, 20, 2, 16))
    q_lens, kv_lens = jnp.array([20, 7, 13], jnp.int32), jnp.array([20, 11, 5], jnp.int32)
    want = jax.nn.dot_product_attention(
        q, k, v, query_seq_lengths=q_lens, key_value_seq_lengths=kv_lens, is_causal=causal, implementation="xla"
    )
    got = ejkernel.scaled_dot_product_attention(q, k, v, None, q_lens, kv_lens, causal=causal)
    close(got, want, 1e-5)
    assert float(jnp.abs(got[1, 7:]).max()) == 0.0  # rows past the length
    by_name = ejkernel.scaled_dot_product_attention(q, k, v, cum_seqlens_q=q_lens, cum_seqlens_k=kv_lens, causal=causal)
    close(by_name, got, 0)
    keys_only = jax.nn.dot_product_attention(q, k, v, key_value_seq_lengths=kv_lens, is_causal=causal)
    close(ejkernel.scaled_dot_product_attention(q, k, v, cum_seqlens_k=kv_lens, causal=causal), keys_only, 1e-5)
    g = jax.grad(lambda q: ejkernel.scaled_dot_product_attention(q, k, v, None, q_lens, kv_lens, causal=causal).sum())
    g_ref = jax.grad(
        lambda q: jax.nn.dot_product_attention(
            q, k, v, query_seq_lengths=q_lens, key_value_seq_lengths=kv_lens, is_causal=causal
        ).sum()
    )
    close(g(q), g_ref(q), 1e-5)


def test_sdpa_lengths_and_boundaries_are_told_by_name():
    """A length-3 vector means per-example lengths as ``cum_seqlens_q`` and boundaries of two
    packed sequences as ``cu_seqlens_q``, whatever its shape suggests."""
    q = normal(0, (2, 12, 2, 16))
    cu = jnp.array([0, 5, 12], jnp.int32)
    with pytest.raises(ValueError, match=r"per-example lengths \[batch\] = \[2\].* go in cu_seqlens_q"):
        ejkernel.scaled_dot_product_attention(q, q, q, None, cu)
    packed = ejkernel.scaled_dot_product_attention(q[:1], q[:1], q[:1], cu_seqlens_q=cu)
    close(packed, ejkernel.flash_attention(q[:1], q[:1], q[:1], None, cu), 1e-5)
    five = jnp.array([5], jnp.int32)
    lengths = ejkernel.scaled_dot_product_attention(q[:1], q[:1], q[:1], None, five, five)
    close(lengths[:, :5], ejkernel.flash_attention(q[:1, :5], q[:1, :5], q[:1, :5]), 1e-5)
    with pytest.raises(ValueError, match="not both"):
        ejkernel.scaled_dot_product_attention(q[:1], q[:1], q[:1], None, jnp.array([5]), cu_seqlens_q=cu)
    with pytest.raises(TypeError, match="integer dtype"):
        ejkernel.scaled_dot_product_attention(q, q, q, None, jnp.array([5.0, 3.0]))


def test_sdpa_lengths_meet_a_mask_info_and_empty_examples_are_zero():
    q = normal(0, (2, 10, 2, 16))
    seg = jnp.array([[0] * 4 + [1] * 6, [0] * 10], jnp.int32)
    mi = ejkernel.types.MaskInfo.from_segments(seg).with_causal()
    lens = jnp.array([8, 0], jnp.int32)
    got = ejkernel.scaled_dot_product_attention(q, q, q, None, lens, lens, mask_info=mi)
    valid = jnp.arange(10)[None] < lens[:, None]
    ref = attention_reference(
        q, q, q, mask_info=ejkernel.types.MaskInfo.from_segments(jnp.where(valid, seg, -1)), causal=True
    )
    close(got, ref, 1e-5)
    assert float(jnp.abs(got[1]).max()) == 0.0  # no key in example 1: zeros (jax.nn.dot_product_attention: the mean)


@pytest.mark.parametrize(
    "op", [ejkernel.flash_attention, ejkernel.scaled_dot_product_attention], ids=lambda f: f.__name__
)
def test_init_bias_and_the_no_op_options(op, qkv):
    q, k, v = qkv
    bias = normal(3, (1, 1, 37, 37))
    out = op(q, k, v, init_bias=lambda: bias)
    close(out, op(q, k, v, bias))
    same = op(q, k, v, bias, normalize_output=True, precision=jax.lax.Precision.DEFAULT, logits_dtype=jnp.float32)
    close(same, out, 0)
    with pytest.raises(ValueError, match="bias or init_bias, not both"):
        op(q, k, v, bias, init_bias=lambda: bias)
    with pytest.raises(TypeError, match="init_bias must be a callable"):
        op(q, k, v, init_bias=bias)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"normalize_output": False}, "normalize_output must be True"),
        ({"precision": jax.lax.Precision.HIGHEST}, "precision=.*HIGHEST is not supported"),
        ({"logits_dtype": jnp.bfloat16}, "logits_dtype must be float32 .* got bfloat16"),
        ({"logits_dtype": "not-a-dtype"}, "logits_dtype must be a dtype"),
    ],
)
def test_options_that_would_change_the_result_are_errors(qkv, option, message):
    with pytest.raises((ValueError, TypeError), match=message):
        ejkernel.flash_attention(*qkv, **option)


def test_dropout_without_a_seed(qkv):
    """Eager: a fresh seed per call (a new mask), as earlier releases did. Under jit a seed is
    required (no hidden randomness in a traced function); a jax.random key is a seed."""
    q, k, v = qkv
    a = ejkernel.flash_attention(q, k, v, dropout_prob=0.3)
    b = ejkernel.flash_attention(q, k, v, dropout_prob=0.3)
    assert not np.array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match=r"under jit needs dropout_seed .*jax\.random key"):
        jax.jit(lambda q: ejkernel.flash_attention(q, k, v, dropout_prob=0.3))(q)
    key = jax.random.key(7)
    f = jax.jit(lambda q, key: ejkernel.flash_attention(q, k, v, dropout_prob=0.3, dropout_seed=key))
    close(f(q, key), f(q, key), 0)
    close(f(q, key), ejkernel.flash_attention(q, k, v, dropout_prob=0.3, dropout_seed=jax.random.bits(key)), 0)
    with pytest.raises(ValueError, match="must be one key"):
        ejkernel.flash_attention(q, k, v, dropout_prob=0.3, dropout_seed=jax.random.split(key, 2))


# -- page_attention ---------------------------------------------------------------------------------


def paged(h=8, hk=2, block_size=16, d=32):
    rng = np.random.default_rng(0)
    num_blocks, max_blocks = 12, 4
    kc = normal(5, (num_blocks, block_size, hk, d))
    vc = normal(6, (num_blocks, block_size, hk, d))
    q = normal(7, (3, h, d))
    tables = jnp.asarray(rng.permutation(num_blocks).reshape(3, max_blocks), jnp.int32)
    lens = jnp.array([5, 64, 33], jnp.int32)
    return q, kc, vc, lens, tables


@pytest.mark.slow
def test_page_cache_layouts():
    q, kc, vc, lens, tables = paged()  # 8 query heads, block 16, 2 kv heads
    ref = page_attention_reference(q, kc, vc, lens, tables)
    kc_t, vc_t = jnp.swapaxes(kc, 1, 2), jnp.swapaxes(vc, 1, 2)  # [blocks, kv_heads, block_size, dim]
    close(ejkernel.page_attention(q, kc, vc, lens, tables), ref, 1e-4)  # the default: this library's layout
    close(ejkernel.page_attention(q, kc_t, vc_t, lens, tables, cache_layout="blocks_heads_tokens"), ref, 1e-4)
    # Never guessed: the earlier layout without cache_layout is read as this library's, and
    # here its 16 "kv heads" do not divide 8 query heads; the error names the way out.
    with pytest.raises(
        ValueError,
        match=r"query has 8 heads, not a multiple of key_cache's 16 kv heads: .*\(12, 2, 16, 32\).*"
        r"pass cache_layout='blocks_heads_tokens'",
    ):
        ejkernel.page_attention(q, kc_t, vc_t, lens, tables)
    # 8 query heads over [blocks, 4, 2, dim] fit both readings: the default reads this library's.
    q, kc, vc, lens, tables = paged(h=8, hk=2, block_size=4)
    close(ejkernel.page_attention(q, kc, vc, lens // 4, tables), page_attention_reference(q, kc, vc, lens // 4, tables))
    with pytest.raises(ValueError, match=r"cache_layout='auto' is not accepted: .* pass 'blocks_tokens_heads'"):
        ejkernel.page_attention(q, kc, vc, lens // 4, tables, cache_layout="auto")
    with pytest.raises(ValueError, match="cache_layout must be one of"):
        ejkernel.page_attention(q, kc, vc, lens // 4, tables, cache_layout="nhd")


def test_page_earlier_names_hints_and_no_ops():
    q, kc, vc, lens, tables = paged()
    want = ejkernel.page_attention(q, kc, vc, lens, tables, softmax_scale=0.3, logits_soft_cap=5.0)
    got = ejkernel.page_attention(q, kc, vc, lens, tables, attn_scale=0.3, attn_logits_soft_cap=5.0)
    close(got, want, 0)
    with pytest.raises(ValueError, match="pass softmax_scale or its earlier name attn_scale, not both"):
        ejkernel.page_attention(q, kc, vc, lens, tables, attn_scale=0.3, softmax_scale=0.3)
    with record_dispatches() as log:
        hinted = ejkernel.page_attention(
            q, kc, vc, lens, tables, num_splits=0, pages_per_compute_block=2, max_context_len=64,
            mask_value=-1e30, megacore_mode="kv_head", inline_seq_dim=False,
        )  # fmt: skip
    close(hinted, ejkernel.page_attention(q, kc, vc, lens, tables), 1e-5)
    assert log[0].config.tokens_per_block == 2 * 16  # pages_per_compute_block × block_size
    with record_dispatches() as log:
        ejkernel.page_attention(
            q, kc, vc, lens, tables, pages_per_compute_block=2, cfg=ejkernel.PageAttentionConfig(tokens_per_block=16)
        )
    assert log[0].config.tokens_per_block == 16  # the explicit cfg wins over the hint
    with pytest.raises(TypeError, match="megacore_mode must be a str"):
        ejkernel.page_attention(q, kc, vc, lens, tables, megacore_mode=3)


def test_one_dimensional_sinks_of_another_length_are_shared_by_every_head(qkv):
    """Earlier releases' ``softmax_aux[num_sinks]``; a length equal to num_heads stays one sink per head."""
    q, k, v = qkv
    aux = normal(8, (3,))
    shared = ejkernel.flash_attention(q, k, v, softmax_aux=aux)
    close(shared, ejkernel.flash_attention(q, k, v, softmax_aux=jnp.broadcast_to(aux, (4, 3))), 0)
    per_head = normal(9, (4,))
    close(
        ejkernel.flash_attention(q, k, v, softmax_aux=per_head),
        ejkernel.flash_attention(q, k, v, softmax_aux=per_head[:, None]),
        0,
    )


# -- ring_attention ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_ring_earlier_blockwise_parameters():
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:4]), ("sp",))
    q, k, v = normal(0, (1, 64, 4, 16)), normal(1, (1, 64, 2, 16)), normal(2, (1, 64, 2, 16))
    aux = normal(3, (4,))
    run = {"axis_name": "sp", "causal": True, "mesh": mesh, "in_specs": (P(None, "sp", None, None),) * 3}
    want = ejkernel.ring_attention(q, k, v, softmax_aux=aux, **run)
    with record_dispatches() as log:
        old = ejkernel.ring_attention(
            q, k, v, None, aux, jax.random.key(0), query_chunk_size=16, key_chunk_size=32, causal_block_size=8,
            deterministic=True, pdrop=0.1, float32_logits=True, policy=jax.checkpoint_policies.nothing_saveable,
            prevent_cse=True, precision=jax.lax.Precision.DEFAULT, dtype=jnp.float32, **run,
        )  # fmt: skip
    close(old, want, 1e-5)
    fwd = log[0].config.fwd_params
    assert (fwd.q_blocksize, fwd.kv_blocksize) == (16, 32)  # the chunk sizes became config hints
    close(ejkernel.ring_attention(q, k, v, aux, **run), want, 0)  # 2026 order: softmax_aux 4th, told by rank
    for option, message in [
        ({"pdrop": 0.1, "deterministic": False}, "dropout .* is not supported"),
        ({"cache_idx": 3}, "cache_idx .* use ejkernel.page_attention"),
        ({"precision": jax.lax.Precision.HIGHEST}, "precision=.*HIGHEST is not supported"),
    ]:
        with pytest.raises(ValueError, match=message):
            ejkernel.ring_attention(q, k, v, **run, **option)


@pytest.mark.slow
def test_ring_causal_block_size_means_causal_and_sinks_widen_the_window():
    """The earlier blockwise ring was causal when given ``causal_block_size`` (it had no
    ``causal``); ``attention_sink_size`` exempts the first keys from the window only."""
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:4]), ("sp",))
    q, k, v = normal(0, (1, 32, 4, 16)), normal(1, (1, 32, 2, 16)), normal(2, (1, 32, 2, 16))
    run = {"axis_name": "sp", "mesh": mesh, "in_specs": (P(None, "sp", None, None),) * 3}
    old = ejkernel.ring_attention(q, k, v, causal_block_size=64, **run)
    close(old, attention_reference(q, k, v, causal=True), 1e-5)
    close(ejkernel.ring_attention(q, k, v, causal=True, attention_sink_size=4, **run), old, 0)  # no window: no-op
    sinks = ejkernel.ring_attention(q, k, v, causal_block_size=8, sliding_window=(3, 0), attention_sink_size=2, **run)
    i, j = np.arange(32)[:, None], np.arange(32)[None, :]
    allowed = (j <= i) & ((j >= i - 3) | (j < 2))  # causal, and the window or one of the 2 sinks
    mi = ejkernel.types.MaskInfo.from_attention_mask(allowed[None, None])
    close(sinks, attention_reference(q, k, v, mask_info=mi), 1e-5)
    with pytest.raises(ValueError, match="attention_sink_size must be >= 0"):
        ejkernel.ring_attention(q, k, v, attention_sink_size=-1, **run)


# -- the plain ``attention`` op: (output, attention_weights) --------------------------------------


def test_attention_returns_output_and_weights(qkv):
    q, k, v = qkv
    bias = normal(3, (1, 4, 37, 37))
    out, w = ejkernel.attention(q, k, v, bias, causal=True, dtype=jnp.float32)
    ref_out, ref_w = ejkernel.ops.get_op("attention").get_reference()(q, k, v, bias, causal=True)
    assert out.shape == (1, 37, 4, 16) and w.shape == (1, 4, 37, 37)
    close(out, ref_out, 1e-5)
    close(w, ref_w, 1e-5)
    close(w.sum(-1), jnp.ones((1, 4, 37)), 1e-5)  # rows are distributions...
    assert float(jnp.abs(jnp.triu(w[0, 0], 1)).max()) == 0.0  # ...over the causal keys only
    # The same output as the other dense ops, and the weights in `dtype` (bfloat16 by default).
    close(out, ejkernel.scaled_dot_product_attention(q, k, v, bias, causal=True), 1e-5)
    out16, w16 = ejkernel.attention(q, k, v, bias, causal=True)
    assert out16.dtype == w16.dtype == jnp.bfloat16
    assert isinstance(ejkernel.modules.Attention(), ejkernel.ops.Op)
    assert ejkernel.modules.attention is ejkernel.attention


def test_attention_takes_the_earlier_attention_mask(qkv):
    """``attention(..., attention_mask=)``: [batch, heads (query, key/value or 1), q, k],
    [batch, q, k], or a key mask [batch, k] shared by every query; True/nonzero = attend."""
    q, k, v = qkv  # 4 query heads, 2 key/value heads
    rng = np.random.default_rng(0)
    reference = ejkernel.ops.get_op("attention").get_reference()
    per_kv_head = rng.random((1, 2, 37, 37)) < 0.6
    keys = rng.random((1, 37)) < 0.7
    keys[0, 0] = True
    for mask, full in [
        (per_kv_head, np.repeat(per_kv_head, 2, axis=1)),  # query head j uses key/value head j // 2
        (per_kv_head[:, :1].astype(np.int32), per_kv_head[:, :1]),
        (per_kv_head[:, 0], per_kv_head[:, :1]),
        (keys, np.broadcast_to(keys[:, None, None, :], (1, 1, 37, 37))),
    ]:
        out, w = ejkernel.attention(q, k, v, attention_mask=jnp.asarray(mask), causal=True, dtype=jnp.float32)
        mi = ejkernel.types.MaskInfo.from_attention_mask(jnp.asarray(full))
        ref_out, ref_w = reference(q, k, v, mask_info=mi, causal=True)
        close(out, ref_out, 1e-5)
        close(w, ref_w, 1e-5)
        assert float(jnp.abs(jnp.where(jnp.asarray(full), 0.0, w)).max()) == 0.0
    # with a bias, both apply (earlier releases dropped the mask when given a bias)
    bias = normal(3, (1, 4, 37, 37))
    out, _ = ejkernel.attention(q, k, v, bias, attention_mask=jnp.asarray(keys), dtype=jnp.float32)
    mi = ejkernel.types.MaskInfo.from_attention_mask(jnp.asarray(np.broadcast_to(keys[:, None, None], (1, 1, 37, 37))))
    close(out, reference(q, k, v, bias, mask_info=mi)[0], 1e-5)
    from ejkernel.kernels._xla.attention import attention as earlier

    close(
        earlier(q, k, v, attention_mask=jnp.asarray(keys), dtype=jnp.float32)[0],
        reference(q, k, v, mask_info=mi)[0],
        1e-5,
    )
    with pytest.raises(ValueError, match=r"attention_mask \(1, 3, 37, 37\) must be .* heads 1, 4 \(query heads\) or 2"):
        ejkernel.attention(q, k, v, attention_mask=jnp.ones((1, 3, 37, 37), bool))
    with pytest.raises(ValueError, match="attention_mask or mask_info, not both"):
        ejkernel.attention(q, k, v, attention_mask=jnp.asarray(keys), mask_info=mi)
    with pytest.raises(TypeError, match="bool or integer"):
        ejkernel.attention(q, k, v, attention_mask=jnp.ones((1, 37)))


def test_attention_fully_masked_rows_have_zero_weights(qkv):
    q, k, v = qkv
    seg = jnp.where(jnp.arange(37) < 30, 0, 1)[None]
    kv_seg = jnp.zeros((1, 37), jnp.int32)  # no key has segment 1: rows 30.. attend nothing
    mi = ejkernel.types.MaskInfo.from_segments(seg, kv_seg)
    out, w = ejkernel.attention(q, k, v, mask_info=mi, dtype=jnp.float32)
    assert float(jnp.abs(w[:, :, 30:]).max()) == 0.0 and float(jnp.abs(out[:, 30:]).max()) == 0.0
    close(w[:, :, :30].sum(-1), jnp.ones((1, 4, 30)), 1e-5)


def test_attention_dropout_follows_deterministic_and_dropout_rng(qkv):
    q, k, v = qkv
    key = jax.random.key(7)
    plain, _ = ejkernel.attention(q, k, v, dropout_prob=0.5, dtype=jnp.float32)  # deterministic=True: no dropout
    close(plain, ejkernel.attention(q, k, v, dtype=jnp.float32)[0], 0)
    o1, w1 = ejkernel.attention(q, k, v, None, key, dropout_prob=0.5, deterministic=False, dtype=jnp.float32)
    o2, _ = ejkernel.attention(q, k, v, None, key, dropout_prob=0.5, deterministic=False, dtype=jnp.float32)
    close(o1, o2, 0)  # the key decides the mask
    assert float(jnp.abs(o1 - plain).max()) > 1e-3
    frac = float(jnp.mean(w1 == 0))
    assert 0.4 < frac < 0.6, frac
    ref_o, ref_w = ejkernel.ops.get_op("attention").get_reference()(
        q, k, v, None, key, dropout_prob=0.5, deterministic=False
    )
    close(o1, ref_o, 1e-5)
    close(w1, ref_w, 1e-5)
    with pytest.raises(ValueError, match="dropout_seed"):
        jax.jit(lambda q: ejkernel.attention(q, k, v, dropout_prob=0.5, deterministic=False)[0])(q)


def test_attention_softmax_dtype(qkv):
    q, k, v = qkv
    ejkernel.attention(q, k, v, softmax_dtype=jnp.float32)
    with pytest.raises(ValueError, match="softmax_dtype"):
        ejkernel.attention(q, k, v, softmax_dtype=jnp.bfloat16)
    with pytest.raises(TypeError, match="dtype"):
        ejkernel.attention(q, k, v, dtype="not-a-dtype")


# -- ring_attention without axis_name ------------------------------------------------------------


@pytest.mark.slow
def test_ring_axis_name_is_optional():
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    q, k, v = (normal(i, (2, 32, 4, 16)) for i in range(3))
    ref = ejkernel.flash_attention(q, k, v, causal=True, platform="xla")
    # No mesh, no axis: the sequence is local (a ring of one), as earlier releases did.
    close(ejkernel.ring_attention(q, k, v, causal=True), ref, 1e-6)
    # mesh + in_specs: the axis sharding the query's sequence is the ring.
    mesh = Mesh(np.array(jax.devices()[:4]), ("sp",))
    spec = P(None, "sp", None, None)
    with record_dispatches() as calls:
        out = ejkernel.ring_attention(q, k, v, causal=True, mesh=mesh, in_specs=(spec,) * 3)
    close(out, ref, 1e-5)
    assert calls and all(c.op == "ring_attention" for c in calls)
    g = jax.grad(lambda q: ejkernel.ring_attention(q, k, v, causal=True, mesh=mesh, in_specs=(spec,) * 3).sum())(q)
    close(g, jax.grad(lambda q: ref_fn(q, k, v).sum())(q), 1e-5)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*with mesh.*:DeprecationWarning")
def test_ring_under_an_ambient_mesh():
    """Earlier releases' ``with mesh: ring_attention(q, k, v, axis_name="sp")`` on global arrays."""
    from jax.sharding import Mesh

    q, k, v = (normal(i, (2, 32, 4, 16)) for i in range(3))
    ref = ref_fn(q, k, v)
    mesh = Mesh(np.array(jax.devices()[:4]), ("sp",))
    with mesh, record_dispatches() as calls:
        out = ejkernel.ring_attention(q, k, v, axis_name="sp", causal=True)
    close(out, ref, 1e-5)
    assert calls[0].op == "ring_attention"
    if hasattr(jax, "set_mesh"):
        with jax.set_mesh(mesh):
            out = jax.jit(lambda q: ejkernel.ring_attention(q, k, v, axis_name="sp", causal=True))(q)
        close(out, ref, 1e-5)
    with pytest.raises(ValueError, match="not bound"):  # no mesh has the axis
        ejkernel.ring_attention(q, k, v, axis_name="sp", causal=True)


def ref_fn(q, k, v):
    return ejkernel.flash_attention(q, k, v, causal=True, platform="xla")


def test_page_config_in_earlier_fields():
    q, kc, vc, lens, tables = paged()
    cfg = ejkernel.PageAttentionConfig(num_splits=0, pages_per_compute_block=2, num_warps=4, num_stages=1)
    with record_dispatches() as log:
        out = ejkernel.page_attention(q, kc, vc, lens, tables, cfg=cfg, platform="xla")
    close(out, ejkernel.page_attention(q, kc, vc, lens, tables), 1e-5)
    used = log[0].config
    assert used.tokens_per_block == 2 * 16 and used.pages_per_compute_block is None and used.num_splits != 0
    with pytest.raises(ValueError, match="num_splits"):
        ejkernel.PageAttentionConfig(num_splits=-1)
