"""Input validation: bad arguments raise ``ValueError``/``TypeError`` naming the argument (and the
shapes) before any kernel runs.

Every test here runs with the XLA implementations' ``run`` replaced by a function that raises
``AssertionError("kernel ran")``: an error that reaches a kernel fails the test instead of
passing by accident. The positive controls show that valid input does reach the patched ``run``.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec

import ejkernel
from ejkernel import MaskInfo
from ejkernel.errors import UnknownPlatformError
from ejkernel_xla.flash_attention.impl import XlaFlashAttention
from ejkernel_xla.page_attention.impl import XlaPageAttention
from ejkernel_xla.scaled_dot_product_attention.impl import XlaScaledDotProductAttention

DENSE_OPS = [ejkernel.flash_attention, ejkernel.scaled_dot_product_attention]
dense = pytest.mark.parametrize("op", DENSE_OPS, ids=lambda f: f.__name__)


class KernelRan(AssertionError):
    pass


@pytest.fixture(autouse=True)
def no_kernel(monkeypatch):
    def run(self, args, cfg):
        raise KernelRan("kernel ran")

    for cls in (XlaFlashAttention, XlaScaledDotProductAttention, XlaPageAttention):
        monkeypatch.setattr(cls, "run", run)


def arr(rng, shape, dtype=jnp.float32):
    return jnp.asarray(rng.standard_normal(shape), dtype)


@pytest.fixture
def qkv(rng):
    """b=2, s=8, h=4, kv heads=2, d=16."""
    return arr(rng, (2, 8, 4, 16)), arr(rng, (2, 8, 2, 16)), arr(rng, (2, 8, 2, 16))


def shape_re(shape):
    return re.escape(str(tuple(shape)))


# -- positive controls -----------------------------------------------------------------------


@dense
def test_valid_input_reaches_the_patched_kernel(op, qkv):
    q, k, v = qkv
    with pytest.raises(KernelRan, match="kernel ran"):
        op(q, k, v, causal=True)


def test_valid_varlen_with_pattern_only_mask_info_reaches_kernel(rng):
    q, k, v = arr(rng, (1, 8, 2, 16)), arr(rng, (1, 8, 2, 16)), arr(rng, (1, 8, 2, 16))
    cu = jnp.array([0, 3, 8], jnp.int32)
    with pytest.raises(KernelRan):
        ejkernel.flash_attention(q, k, v, cum_seqlens_q=cu, mask_info=MaskInfo().with_causal())


# -- dense attention: arrays -----------------------------------------------------------------


@dense
def test_query_not_an_array(op, qkv):
    q, k, v = qkv
    with pytest.raises(TypeError, match=rf"{op.__name__}: query must be an array .*got list"):
        op(np.asarray(q).tolist(), k, v)


@dense
def test_query_3d(op, qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match=rf"query must be 4-D .*got shape {shape_re((2, 8, 4))}"):
        op(q[..., 0], k, v)


@pytest.mark.parametrize("which", ["query", "key", "value"])
def test_integer_dtype(which, qkv):
    args = dict(zip(("query", "key", "value"), qkv, strict=True))
    args[which] = args[which].astype(jnp.int32)
    with pytest.raises(TypeError, match=rf"{which} must have a floating dtype, got int32"):
        ejkernel.flash_attention(**args)


@dense
def test_mixed_dtypes(op, qkv):
    q, k, v = qkv
    with pytest.raises(TypeError, match=r"key \(bfloat16\) must have the dtype of query \(float32\)"):
        op(q, k.astype(jnp.bfloat16), v)


@dense
def test_batch_mismatch(op, rng, qkv):
    q, k, _ = qkv
    v = arr(rng, (3, 8, 2, 16))
    with pytest.raises(ValueError, match=rf"value must have batch = 2 like query: .*value {shape_re(v.shape)}"):
        op(q, k, v)


def test_key_value_seq_mismatch(rng, qkv):
    q, k, _ = qkv
    v = arr(rng, (2, 9, 2, 16))
    with pytest.raises(ValueError, match=rf"value must have seq_k = 8 like key: key {shape_re(k.shape)}"):
        ejkernel.flash_attention(q, k, v)


def test_head_dim_mismatch(rng, qkv):
    q, _, v = qkv
    k = arr(rng, (2, 8, 2, 8))
    with pytest.raises(ValueError, match=rf"key must have head_dim = 16 like query: query {shape_re(q.shape)}"):
        ejkernel.flash_attention(q, k, v)


@dense
def test_zero_kv_heads(op, rng, qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match=r"num_heads \(4\) must be a multiple of num_kv_heads \(0\)"):
        op(q, k[:, :, :0], v[:, :, :0])


def test_key_value_heads_mismatch(rng, qkv):
    q, k, _ = qkv
    v = arr(rng, (2, 8, 1, 16))
    with pytest.raises(ValueError, match=r"value must have num_kv_heads = 2 like key"):
        ejkernel.flash_attention(q, k, v)


@dense
def test_heads_not_multiple_of_kv_heads(op, rng):
    q, k, v = arr(rng, (2, 8, 3, 16)), arr(rng, (2, 8, 2, 16)), arr(rng, (2, 8, 2, 16))
    with pytest.raises(
        ValueError, match=r"num_heads \(3\) must be a multiple of num_kv_heads \(2\): query \(2, 8, 3, 16\)"
    ):
        op(q, k, v)


@dense
@pytest.mark.parametrize("shape", [(2, 4, 5, 8), (3, 1, 1, 1), (1, 2, 8, 8), (8, 7)])
def test_bias_not_broadcastable(op, rng, qkv, shape):
    q, k, v = qkv
    bias = arr(rng, shape)
    with pytest.raises(ValueError, match=rf"bias {shape_re(shape)} does not broadcast to .*\(2, 4, 8, 8\)"):
        op(q, k, v, bias)


def test_bias_bad_rank_and_dtype(rng, qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match=r"bias must be 2-D or 3-D or 4-D .*got shape \(8,\)"):
        ejkernel.flash_attention(q, k, v, arr(rng, (8,)))
    with pytest.raises(TypeError, match=r"bias must have a floating dtype"):
        ejkernel.flash_attention(q, k, v, jnp.zeros((8, 8), jnp.int32))


# -- dense attention: options ----------------------------------------------------------------


@dense
@pytest.mark.parametrize(
    ("window", "msg"),
    [(-1, r"sliding_window must be >= 0, got -1"), ((2, -3), r"sliding_window right size must be >= 0, got -3")],
)
def test_negative_sliding_window(op, qkv, window, msg):
    with pytest.raises(ValueError, match=msg):
        op(*qkv, sliding_window=window)


@pytest.mark.parametrize(
    ("window", "msg"),
    [
        (2.5, r"sliding_window must be None, an int or a \(left, right\) pair"),
        ((1, 2, 3), r"sliding_window must be None, an int or a \(left, right\) pair"),
        ("4", r"sliding_window must be None"),
        (True, r"sliding_window must be None"),
        ((1.0, 2), r"sliding_window left size must be an int, got float"),
    ],
)
def test_bad_window_type(qkv, window, msg):
    with pytest.raises(TypeError, match=msg):
        ejkernel.flash_attention(*qkv, sliding_window=window)


@dense
@pytest.mark.parametrize("cap", [0.0, -1.0])
def test_soft_cap_not_positive(op, qkv, cap):
    with pytest.raises(ValueError, match=rf"logits_soft_cap must be > 0, got {cap}"):
        op(*qkv, logits_soft_cap=cap)


def test_soft_cap_not_finite(qkv):
    with pytest.raises(ValueError, match=r"logits_soft_cap must be finite"):
        ejkernel.flash_attention(*qkv, logits_soft_cap=float("inf"))


@dense
def test_softmax_scale_array_is_rejected(op, qkv):
    with pytest.raises(TypeError, match=r"softmax_scale must be a Python float \(a static option\), got ArrayImpl"):
        op(*qkv, softmax_scale=jnp.asarray(0.25))


@pytest.mark.parametrize("scale", [0.0, -0.5])
def test_softmax_scale_must_be_positive(qkv, scale):
    with pytest.raises(ValueError, match=r"softmax_scale must be > 0"):
        ejkernel.flash_attention(*qkv, softmax_scale=scale)


def test_causal_must_be_bool(qkv):
    with pytest.raises(TypeError, match=r"causal must be a bool, got int"):
        ejkernel.flash_attention(*qkv, causal=1)


@dense
@pytest.mark.parametrize("p", [1.0, -0.1, 1.5])
def test_dropout_prob_out_of_range(op, qkv, p):
    with pytest.raises(ValueError, match=r"dropout_prob must be in \[0, 1\)"):
        op(*qkv, dropout_prob=p, dropout_seed=0)


@dense
def test_dropout_without_seed_under_jit(op, qkv):
    """Eager calls draw a fresh seed (tests/framework/test_dropin_params.py); a traced one must not."""
    with pytest.raises(ValueError, match=r"dropout_prob > 0 under jit needs dropout_seed"):
        jax.jit(lambda *a: op(*a, dropout_prob=0.1))(*qkv)


def test_dropout_seed_float_array(qkv):
    with pytest.raises(TypeError, match=r"dropout_seed must have an integer dtype"):
        ejkernel.flash_attention(*qkv, dropout_prob=0.1, dropout_seed=jnp.asarray(1.0))


# -- dense attention: varlen -----------------------------------------------------------------


@dense
def test_cum_seqlens_with_batch_2(op, qkv):
    # scaled_dot_product_attention names packed boundaries cu_seqlens_q (its cum_seqlens_q are lengths).
    name = "cu_seqlens_q" if op is ejkernel.scaled_dot_product_attention else "cum_seqlens_q"
    with pytest.raises(ValueError, match=rf"with {name} the sequences are packed .* query batch must be 1, got 2"):
        op(*qkv, **{name: jnp.array([0, 3, 8], jnp.int32)})


def test_cum_seqlens_k_without_q(rng):
    q = k = v = arr(rng, (1, 8, 2, 16))
    with pytest.raises(ValueError, match=r"cum_seqlens_k needs cum_seqlens_q"):
        ejkernel.flash_attention(q, k, v, cum_seqlens_k=jnp.array([0, 3, 8], jnp.int32))


@pytest.mark.parametrize(
    ("name", "cu"),
    [("cum_seqlens_q", [0, 5, 3, 8]), ("cum_seqlens_q", [1, 3, 8]), ("cum_seqlens_q", [0, 3, 9])],
)
def test_bad_cum_seqlens_values(rng, name, cu):
    q = k = v = arr(rng, (1, 8, 2, 16))
    with pytest.raises(ValueError, match=rf"{name} must start at 0, never decrease .*{re.escape(str(cu))}"):
        ejkernel.flash_attention(q, k, v, cum_seqlens_q=jnp.array(cu, jnp.int32))


def test_non_monotonic_cum_seqlens_k(rng):
    q = k = v = arr(rng, (1, 8, 2, 16))
    cu_q = jnp.array([0, 3, 8], jnp.int32)
    with pytest.raises(ValueError, match=r"cum_seqlens_k must start at 0, never decrease .*\[0, 6, 2\]"):
        ejkernel.flash_attention(q, k, v, cum_seqlens_q=cu_q, cum_seqlens_k=jnp.array([0, 6, 2], jnp.int32))


def test_cum_seqlens_float_dtype(rng):
    q = k = v = arr(rng, (1, 8, 2, 16))
    with pytest.raises(TypeError, match=r"cum_seqlens_q must have an integer dtype"):
        ejkernel.flash_attention(q, k, v, cum_seqlens_q=jnp.array([0.0, 8.0]))


def test_cum_seqlens_count_mismatch(rng):
    q = k = v = arr(rng, (1, 8, 2, 16))
    with pytest.raises(ValueError, match=r"cum_seqlens_q \(3,\) and cum_seqlens_k \(2,\) must both be"):
        ejkernel.flash_attention(
            q, k, v, cum_seqlens_q=jnp.array([0, 3, 8], jnp.int32), cum_seqlens_k=jnp.array([0, 8], jnp.int32)
        )


def test_cum_seqlens_k_required_for_cross_lengths(rng):
    q, k, v = arr(rng, (1, 8, 2, 16)), arr(rng, (1, 12, 2, 16)), arr(rng, (1, 12, 2, 16))
    with pytest.raises(ValueError, match=r"cum_seqlens_k is required when seq_q \(8\) != seq_k \(12\)"):
        ejkernel.flash_attention(q, k, v, cum_seqlens_q=jnp.array([0, 3, 8], jnp.int32))


@pytest.mark.parametrize("kind", ["segments", "pairwise"])
def test_cum_seqlens_with_mask_info(rng, kind):
    q = k = v = arr(rng, (1, 8, 2, 16))
    seg = np.array([[0, 0, 0, 1, 1, 1, 1, 1]], np.int32)
    mi = MaskInfo.from_segments(seg)
    if kind == "pairwise":
        mi = MaskInfo.from_attention_mask(mi.to_attention_mask())
    with pytest.raises(ValueError, match=r"pass either cum_seqlens_q/k or a mask_info"):
        ejkernel.flash_attention(q, k, v, mask_info=mi, cum_seqlens_q=jnp.array([0, 3, 8], jnp.int32))


# -- dense attention: sinks and masks --------------------------------------------------------


@dense
@pytest.mark.parametrize("shape", [(2, 1), (3, 2)])
def test_softmax_aux_wrong_heads(op, rng, qkv, shape):
    with pytest.raises(ValueError, match=r"softmax_aux must have num_heads = 4 like query: query \(2, 8, 4, 16\)"):
        op(*qkv, softmax_aux=arr(rng, shape))


def test_softmax_aux_bad_rank(rng, qkv):
    with pytest.raises(ValueError, match=r"softmax_aux must be 1-D or 2-D"):
        ejkernel.flash_attention(*qkv, softmax_aux=arr(rng, (4, 1, 1)))


@dense
@pytest.mark.parametrize("bad", [np.ones((2, 8), np.int32), {"q_segment_ids": None}])
def test_mask_info_wrong_type(op, qkv, bad):
    with pytest.raises(TypeError, match=r"mask_info must be an ejkernel.types.MaskInfo"):
        op(*qkv, mask_info=bad)


@pytest.mark.parametrize(
    ("q_shape", "kv_shape", "msg"),
    [
        ((2, 5), (2, 8), r"mask_info q_segment_ids \(2, 5\) must be \[batch, seq_q\] = \(2, 8\)"),
        ((1, 8), (1, 8), r"mask_info q_segment_ids \(1, 8\) must be \[batch, seq_q\] = \(2, 8\)"),
        ((2, 8), (2, 7), r"mask_info kv_segment_ids \(2, 7\) must be \[batch, seq_k\] = \(2, 8\)"),
    ],
)
def test_mask_info_segments_wrong_shape(rng, qkv, q_shape, kv_shape, msg):
    mi = MaskInfo.from_segments(rng.integers(0, 2, q_shape), rng.integers(0, 2, kv_shape))
    with pytest.raises(ValueError, match=msg):
        ejkernel.flash_attention(*qkv, mask_info=mi)


@pytest.mark.parametrize("shape", [(2, 1, 8, 7), (3, 1, 8, 8), (2, 2, 8, 8)])
def test_mask_info_pairwise_wrong_shape(rng, qkv, shape):
    mi = MaskInfo.from_attention_mask(rng.random(shape) < 0.5)
    with pytest.raises(ValueError, match=rf"mask_info attention_mask {shape_re(shape)} must be"):
        ejkernel.flash_attention(*qkv, mask_info=mi)


# -- call options ----------------------------------------------------------------------------


@dense
def test_platform_not_a_str(op, qkv):
    with pytest.raises(TypeError, match=r"platform must be a str or Platform, got int"):
        op(*qkv, platform=3)


@dense
def test_unknown_platform(op, qkv):
    with pytest.raises(
        ValueError, match=r"^\w+: unknown platform 'no-such-platform'; installed for \w+: .*xla"
    ) as info:
        op(*qkv, platform="no-such-platform")
    assert isinstance(info.value, UnknownPlatformError)
    assert info.value.algorithm == op.__name__ and "xla" in info.value.installed


def test_cfg_of_another_op(qkv):
    with pytest.raises(TypeError, match=r"cfg must be a FlashAttentionConfig, got PageAttentionConfig"):
        ejkernel.flash_attention(*qkv, cfg=ejkernel.PageAttentionConfig())


@dense
def test_in_specs_without_mesh(op, qkv):
    specs = (PartitionSpec(), PartitionSpec(), PartitionSpec())
    with pytest.raises(ValueError, match=r"in_specs/out_specs need mesh="):
        op(*qkv, in_specs=specs)


@dense
def test_mesh_without_in_specs(op, qkv):
    mesh = Mesh(np.array(jax.devices()[:1]), ("x",))
    with pytest.raises(ValueError, match=r"mesh= needs in_specs"):
        op(*qkv, mesh=mesh)


def test_mesh_not_a_mesh(qkv):
    with pytest.raises(TypeError, match=r"mesh must be a jax.sharding.Mesh"):
        ejkernel.flash_attention(*qkv, mesh="x", in_specs=(PartitionSpec(),) * 3)


# -- page attention --------------------------------------------------------------------------

NUM_BLOCKS, BLOCK, MAX_BLOCKS = 8, 4, 3


@pytest.fixture
def paged(rng):
    """query [2, 4, 16]; caches [8 pages, 4 tokens, 2 kv heads, 16]; tables [2, 3]."""
    return dict(
        query=arr(rng, (2, 4, 16)),
        key_cache=arr(rng, (NUM_BLOCKS, BLOCK, 2, 16)),
        value_cache=arr(rng, (NUM_BLOCKS, BLOCK, 2, 16)),
        context_lens=jnp.array([5, 12], jnp.int32),
        block_tables=jnp.array([[3, 1, 7], [0, 2, 6]], jnp.int32),
    )


@pytest.mark.parametrize("with_seq_axis", [False, True])
def test_page_valid_input_reaches_kernel(paged, with_seq_axis):
    if with_seq_axis:
        paged["query"] = paged["query"][:, None]
    with pytest.raises(KernelRan):
        ejkernel.page_attention(**paged)


def test_page_unused_table_entries_are_not_checked(paged):
    # Sequence 0 has 5 tokens: pages 0 and 1 of its row are used, page 2 is not.
    paged["block_tables"] = jnp.array([[3, 1, 99], [0, 2, 6]], jnp.int32)
    with pytest.raises(KernelRan):
        ejkernel.page_attention(**paged)


def test_page_4d_query_with_long_seq_axis(rng, paged):
    paged["query"] = arr(rng, (2, 2, 4, 16))
    with pytest.raises(ValueError, match=r"a 4-D query must be \[batch, 1, num_heads, head_dim\], got \(2, 2, 4, 16\)"):
        ejkernel.page_attention(**paged)


def test_page_query_bad_rank(rng, paged):
    paged["query"] = arr(rng, (2, 64))
    with pytest.raises(ValueError, match=r"page_attention: query must be 3-D or 4-D .*got shape \(2, 64\)"):
        ejkernel.page_attention(**paged)


@pytest.mark.parametrize("shape", [(NUM_BLOCKS, BLOCK, 1, 16), (NUM_BLOCKS - 1, BLOCK, 2, 16), (NUM_BLOCKS, 2, 2, 16)])
def test_page_cache_shape_mismatch(rng, paged, shape):
    paged["value_cache"] = arr(rng, shape)
    with pytest.raises(ValueError, match=rf"value_cache must have \w+ = \d+ like key_cache: .*{shape_re(shape)}"):
        ejkernel.page_attention(**paged)


def test_page_head_dim_mismatch(rng, paged):
    paged["query"] = arr(rng, (2, 4, 8))
    with pytest.raises(ValueError, match=r"key_cache must have head_dim = 8 like query: query \(2, 4, 8\)"):
        ejkernel.page_attention(**paged)


@pytest.mark.parametrize("layout", [None, "blocks_tokens_heads", "blocks_heads_tokens"])
def test_page_heads_not_multiple(rng, paged, layout):
    """3 query heads over 2 kv heads: the head mismatch is reported (in either layout, and by
    default), not a layout question."""
    paged["query"] = arr(rng, (2, 3, 16))
    if layout is not None:
        paged["cache_layout"] = layout
    if layout == "blocks_heads_tokens":
        paged["key_cache"] = paged["value_cache"] = arr(rng, (NUM_BLOCKS, 2, BLOCK, 16))
    shape = re.escape(str(tuple(paged["key_cache"].shape)))
    with pytest.raises(
        ValueError,
        match=rf"page_attention: query has 3 heads, not a multiple of key_cache's 2 kv heads: "
        rf"query \(2, 3, 16\), key_cache {shape}",
    ):
        ejkernel.page_attention(**paged)


def test_page_zero_kv_heads(rng, paged):
    """Caches with no kv heads are rejected with a ValueError (like the dense ops), not a crash."""
    paged["key_cache"] = arr(rng, (NUM_BLOCKS, BLOCK, 0, 16))
    paged["value_cache"] = arr(rng, (NUM_BLOCKS, BLOCK, 0, 16))
    with pytest.raises(ValueError, match=r"num_kv_heads \(0\)|empty dimensions"):
        ejkernel.page_attention(**paged)


def test_page_cache_dtype_mismatch(paged):
    paged["value_cache"] = paged["value_cache"].astype(jnp.bfloat16)
    with pytest.raises(TypeError, match=r"value_cache \(bfloat16\) must have the dtype of query \(float32\)"):
        ejkernel.page_attention(**paged)


@pytest.mark.parametrize("lens", [[5, MAX_BLOCKS * BLOCK + 1], [-1, 4]])
def test_page_context_lens_out_of_range(paged, lens):
    paged["context_lens"] = jnp.array(lens, jnp.int32)
    with pytest.raises(
        ValueError,
        match=rf"context_lens must be in \[0, max_blocks \* block_size = 12\]; got .* in {re.escape(str(lens))}",
    ):
        ejkernel.page_attention(**paged)


@pytest.mark.parametrize(("row", "col", "value"), [(1, 2, NUM_BLOCKS), (0, 1, -1), (1, 0, 100)])
def test_page_used_block_out_of_range(paged, row, col, value):
    tables = np.array([[3, 1, 7], [0, 2, 6]], np.int32)
    tables[row, col] = value
    paged["block_tables"] = jnp.asarray(tables)
    with pytest.raises(
        ValueError,
        match=rf"block_tables must index the cache's 8 blocks .*; got block_tables\[{row}, {col}\] = {value}",
    ):
        ejkernel.page_attention(**paged)


@pytest.mark.parametrize("which", ["context_lens", "block_tables"])
def test_page_wrong_batch(paged, which):
    paged[which] = paged[which][:1]
    with pytest.raises(ValueError, match=rf"{which} must have batch = 2 like query: query \(2, 4, 16\)"):
        ejkernel.page_attention(**paged)


@pytest.mark.parametrize("which", ["context_lens", "block_tables"])
def test_page_float_indices(paged, which):
    paged[which] = paged[which].astype(jnp.float32)
    with pytest.raises(TypeError, match=rf"{which} must have an integer dtype, got float32"):
        ejkernel.page_attention(**paged)


def test_page_context_lens_not_an_array(paged):
    paged["context_lens"] = [5, 12]
    with pytest.raises(TypeError, match=r"context_lens must be an array \[batch\], got list"):
        ejkernel.page_attention(**paged)


def test_page_softmax_aux_wrong_heads(rng, paged):
    with pytest.raises(ValueError, match=r"softmax_aux must have num_heads = 4 like query: query \(2, 4, 16\)"):
        ejkernel.page_attention(**paged, softmax_aux=arr(rng, (2, 1)))
