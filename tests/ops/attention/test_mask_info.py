"""``MaskInfo``: constructors, conversions between its encodings, patterns, pytree, end to end."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel import MaskInfo
from ejkernel.testing import attention_reference


def random_segments(rng, b, s, n_seg=3, pad=2):
    """Sorted segment ids ``[b, s]`` with ``n_seg`` runs per row and ``pad`` trailing ``-1``."""
    rows = []
    for _ in range(b):
        cuts = np.sort(rng.choice(np.arange(1, s - pad), n_seg - 1, replace=False))
        row = np.searchsorted(cuts, np.arange(s - pad), side="right")
        rows.append(np.concatenate([row, -np.ones(pad, np.int64)]))
    return np.stack(rows).astype(np.int32)


def numpy_segment_mask(q_seg, kv_seg):
    q_seg, kv_seg = np.asarray(q_seg), np.asarray(kv_seg)
    return ((q_seg[:, :, None] == kv_seg[:, None, :]) & (q_seg[:, :, None] >= 0))[:, None]


def numpy_pattern(sq, sk, causal=False, window=None):
    out = np.zeros((sq, sk), bool)
    off = sk - sq
    for i in range(sq):
        for j in range(sk):
            ok = True
            if causal:
                ok &= j <= i + off
            if window is not None:
                ok &= i + off - window[0] <= j <= i + off + window[1]
            out[i, j] = ok
    return out


# -- from_segments ---------------------------------------------------------------------------


def test_from_segments_int32_and_kv_defaults_to_q(rng):
    seg = rng.integers(0, 3, (2, 6)).astype(np.int64)
    mi = MaskInfo.from_segments(seg)
    assert mi.q_segment_ids.dtype == jnp.int32
    assert mi.kv_segment_ids.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(mi.q_segment_ids), seg)
    np.testing.assert_array_equal(np.asarray(mi.kv_segment_ids), seg)
    assert mi.has_segments and not mi.has_pairwise
    assert mi.seq_lens == (6, 6) and mi.batch_size == 2


def test_from_segments_cross(rng):
    q = rng.integers(0, 3, (2, 5)).astype(np.int32)
    kv = rng.integers(0, 3, (2, 7)).astype(np.int8)
    mi = MaskInfo.from_segments(q, kv)
    assert mi.kv_segment_ids.dtype == jnp.int32
    assert mi.seq_lens == (5, 7)
    np.testing.assert_array_equal(np.asarray(mi.kv_segment_ids), kv)


def test_from_segments_batch_mismatch():
    with pytest.raises(ValueError, match=r"differ in batch size"):
        MaskInfo.from_segments(np.zeros((2, 4), np.int32), np.zeros((3, 4), np.int32))


def test_from_segments_rejects_float_dtype():
    with pytest.raises(TypeError, match=r"q_segment_ids must have an integer dtype"):
        MaskInfo.from_segments(np.array([[0.0, 1.0]], np.float32))
    with pytest.raises(TypeError, match=r"kv_segment_ids must have an integer dtype"):
        MaskInfo.from_segments(np.array([[0, 1]]), np.array([[0.0, 1.0]]))


def test_from_segments_rejects_1d():
    with pytest.raises(ValueError, match=r"q_segment_ids must be 2-D.*\(4,\)"):
        MaskInfo.from_segments(np.array([0, 0, 1, 1], np.int32))


def test_segments_given_alone_rejected():
    with pytest.raises(ValueError, match="together"):
        MaskInfo(q_segment_ids=jnp.zeros((1, 3), jnp.int32))


# -- from_attention_mask ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [bool, np.int32])
def test_from_attention_mask_2d_padding(dtype):
    pad = np.array([[1, 1, 1, 0, 0], [1, 0, 1, 1, 0]], dtype)
    mi = MaskInfo.from_attention_mask(pad)
    expect = np.array([[0, 0, 0, -1, -1], [0, -1, 0, 0, -1]], np.int32)
    assert mi.q_segment_ids.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(mi.q_segment_ids), expect)
    np.testing.assert_array_equal(np.asarray(mi.kv_segment_ids), expect)
    # Kernels get the segments; no pairwise mask is stored, but (as the older API documents) the
    # attention_mask property gives the 4-D pairwise mask of the padding.
    assert mi.stored_attention_mask is None and not mi.has_pairwise
    np.testing.assert_array_equal(np.asarray(mi.attention_mask), numpy_segment_mask(expect, expect))


@pytest.mark.parametrize("dtype", [bool, np.int32])
def test_from_attention_mask_3d_becomes_4d(rng, dtype):
    m = (rng.random((2, 4, 6)) < 0.5).astype(dtype)
    mi = MaskInfo.from_attention_mask(m)
    assert mi.attention_mask.shape == (2, 1, 4, 6)
    assert mi.attention_mask.dtype == jnp.bool_
    np.testing.assert_array_equal(np.asarray(mi.attention_mask)[:, 0], m.astype(bool))
    assert not mi.has_segments and mi.seq_lens == (4, 6)


def test_from_attention_mask_4d_kept(rng):
    m = rng.random((2, 3, 4, 6)) < 0.5
    mi = MaskInfo.from_attention_mask(jnp.asarray(m))
    assert mi.attention_mask.shape == (2, 3, 4, 6)
    np.testing.assert_array_equal(np.asarray(mi.attention_mask), m)


def test_from_attention_mask_int_values_nonzero_attend():
    m = np.array([[[0, 2], [1, 0]]], np.int32)
    mi = MaskInfo.from_attention_mask(m)
    np.testing.assert_array_equal(np.asarray(mi.attention_mask)[0, 0], [[False, True], [True, False]])


@pytest.mark.parametrize("shape", [(2, 1, 1, 4, 4), (5,)])
def test_from_attention_mask_bad_rank(shape):
    with pytest.raises(ValueError, match=r"attention mask must be .*got shape"):
        MaskInfo.from_attention_mask(np.ones(shape, bool))


# -- from_cu_seqlens -------------------------------------------------------------------------


def test_from_cu_seqlens():
    mi = MaskInfo.from_cu_seqlens(jnp.array([0, 3, 7]))
    expect = [[0, 0, 0, 1, 1, 1, 1]]
    np.testing.assert_array_equal(np.asarray(mi.q_segment_ids), expect)
    np.testing.assert_array_equal(np.asarray(mi.kv_segment_ids), expect)
    assert mi.q_segment_ids.dtype == jnp.int32


def test_from_cu_seqlens_padding():
    mi = MaskInfo.from_cu_seqlens(np.array([0, 3, 7]), seq_len_q=10)
    expect = [[0, 0, 0, 1, 1, 1, 1, -1, -1, -1]]
    np.testing.assert_array_equal(np.asarray(mi.q_segment_ids), expect)
    np.testing.assert_array_equal(np.asarray(mi.kv_segment_ids), expect)


def test_from_cu_seqlens_cross():
    mi = MaskInfo.from_cu_seqlens(jnp.array([0, 3, 7]), jnp.array([0, 2, 5]), seq_len_k=6)
    np.testing.assert_array_equal(np.asarray(mi.q_segment_ids), [[0, 0, 0, 1, 1, 1, 1]])
    np.testing.assert_array_equal(np.asarray(mi.kv_segment_ids), [[0, 0, 1, 1, 1, -1]])
    m = np.asarray(mi.to_attention_mask())[0, 0]
    assert m[0].tolist() == [True, True, False, False, False, False]
    assert m[4].tolist() == [False, False, True, True, True, False]


def test_from_cu_seqlens_mismatched_counts():
    with pytest.raises(ValueError, match="cu_seqlens must be 1-D"):
        MaskInfo.from_cu_seqlens(jnp.array([0, 3, 7]), jnp.array([0, 7]))


def test_from_cu_seqlens_under_jit_needs_seq_len():
    cu = jnp.array([0, 3, 7], jnp.int32)
    with pytest.raises(ValueError, match="seq_len_q"):
        jax.jit(lambda c: MaskInfo.from_cu_seqlens(c))(cu)
    mi = jax.jit(lambda c: MaskInfo.from_cu_seqlens(c, seq_len_q=9))(cu)
    assert isinstance(mi, MaskInfo)
    np.testing.assert_array_equal(np.asarray(mi.q_segment_ids), [[0, 0, 0, 1, 1, 1, 1, -1, -1]])
    np.testing.assert_array_equal(np.asarray(mi.kv_segment_ids), [[0, 0, 0, 1, 1, 1, 1, -1, -1]])


# -- to_attention_mask -----------------------------------------------------------------------


def test_to_attention_mask_segments(rng):
    q = rng.integers(-1, 3, (2, 7)).astype(np.int32)
    kv = rng.integers(-1, 3, (2, 9)).astype(np.int32)
    m = MaskInfo.from_segments(q, kv).to_attention_mask()
    assert m.shape == (2, 1, 7, 9) and m.dtype == jnp.bool_
    expect = np.zeros((2, 1, 7, 9), bool)
    for b in range(2):
        for i in range(7):
            for j in range(9):
                expect[b, 0, i, j] = q[b, i] >= 0 and q[b, i] == kv[b, j]
    np.testing.assert_array_equal(np.asarray(m), expect)


@pytest.mark.parametrize(("sq", "sk"), [(6, 6), (4, 9), (9, 4)])
@pytest.mark.parametrize(
    ("causal", "window"), [(True, None), (False, (2, 1)), (True, (1, 0)), (False, (0, 3)), (True, (3, 3))]
)
def test_to_attention_mask_patterns_bottom_right(rng, sq, sk, causal, window):
    q = rng.integers(0, 2, (2, sq)).astype(np.int32)
    kv = rng.integers(0, 2, (2, sk)).astype(np.int32)
    mi = MaskInfo.from_segments(q, kv).with_causal(causal).with_sliding_window(window)
    assert mi.causal is causal and mi.sliding_window == window
    expect = numpy_segment_mask(q, kv) & numpy_pattern(sq, sk, causal, window)
    np.testing.assert_array_equal(np.asarray(mi.to_attention_mask()), expect)


def test_causal_alignment_explicit():
    """seq_q=3, seq_k=5: query i sees keys j <= i + 2."""
    m = np.asarray(MaskInfo().with_causal().to_attention_mask(3, 5))[0, 0]
    assert m.astype(int).tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]


def test_window_int_is_symmetric():
    assert MaskInfo().with_sliding_window(2).sliding_window == (2, 2)
    m = np.asarray(MaskInfo().with_sliding_window(1).to_attention_mask(4, 4))[0, 0]
    np.testing.assert_array_equal(m, numpy_pattern(4, 4, window=(1, 1)))


def test_pairwise_mask_composes_with_pattern(rng):
    pair = rng.random((1, 2, 5, 5)) < 0.6
    m = MaskInfo.from_attention_mask(pair).with_causal().to_attention_mask()
    assert m.shape == (1, 2, 5, 5)
    np.testing.assert_array_equal(np.asarray(m), pair & numpy_pattern(5, 5, causal=True))


def test_pattern_only_needs_seq_lens():
    mi = MaskInfo().with_causal()
    assert mi.seq_lens is None and mi.batch_size is None
    with pytest.raises(ValueError, match="seq_len_q and seq_len_k"):
        mi.to_attention_mask()
    with pytest.raises(ValueError, match="seq_len_q and seq_len_k"):
        mi.to_attention_mask(seq_len_q=4)
    assert mi.to_attention_mask(4, 6).shape == (1, 1, 4, 6)


@pytest.mark.parametrize("bad", [-1, (1, -2)])
def test_with_sliding_window_rejects_negative(bad):
    with pytest.raises(ValueError, match="sliding_window"):
        MaskInfo().with_sliding_window(bad)


# -- to_segment_ids --------------------------------------------------------------------------


@pytest.mark.parametrize("cross", [False, True])
def test_to_segment_ids_recovers_segment_mask(rng, cross):
    q = rng.integers(-1, 4, (2, 10)).astype(np.int32)
    kv = rng.integers(-1, 4, (2, 13)).astype(np.int32) if cross else q
    pair = MaskInfo.from_segments(q, kv).to_attention_mask()
    mi = MaskInfo.from_attention_mask(pair)
    q2, kv2 = mi.to_segment_ids()
    assert q2.shape == q.shape and kv2.shape == kv.shape
    assert q2.dtype == jnp.int32 and kv2.dtype == jnp.int32
    rebuilt = MaskInfo.from_segments(q2, kv2).to_attention_mask()
    np.testing.assert_array_equal(np.asarray(rebuilt), np.asarray(pair))


def test_to_segment_ids_of_segments_is_identity(rng):
    q = random_segments(rng, 2, 8)
    q2, kv2 = MaskInfo.from_segments(q).to_segment_ids()
    np.testing.assert_array_equal(np.asarray(q2), q)
    np.testing.assert_array_equal(np.asarray(kv2), q)


def test_to_segment_ids_rejects_non_segment_mask(rng):
    m = rng.random((1, 1, 8, 8)) < 0.5
    m[0, 0, 0, :2] = [True, False]  # rows 0 and 1 overlap without seeing the same keys
    m[0, 0, 1, :2] = [True, True]
    with pytest.raises(ValueError, match="not a segment mask"):
        MaskInfo.from_attention_mask(m).to_segment_ids(check=True)
    # Without the check, it returns labels anyway.
    q, kv = MaskInfo.from_attention_mask(m).to_segment_ids(check=False)
    assert q.shape == (1, 8) and kv.shape == (1, 8)


def test_to_segment_ids_rejects_causal_mask():
    causal = np.tril(np.ones((6, 6), bool))[None, None]
    with pytest.raises(ValueError, match="not a segment mask"):
        MaskInfo.from_attention_mask(causal).to_segment_ids()


def test_to_segment_ids_pattern_only():
    with pytest.raises(ValueError, match="only patterns"):
        MaskInfo().with_causal().to_segment_ids()


# -- to_cu_seqlens ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cu_q", "cu_k", "kw"),
    [
        ([0, 3, 7], None, {}),
        ([0, 3, 7], None, {"seq_len_q": 10}),
        ([0, 1, 5, 6], [0, 4, 5, 9], {"seq_len_k": 11}),
    ],
)
def test_cu_seqlens_roundtrip(cu_q, cu_k, kw):
    mi = MaskInfo.from_cu_seqlens(np.array(cu_q), None if cu_k is None else np.array(cu_k), **kw)
    out_q, out_k = mi.to_cu_seqlens()
    assert out_q.dtype == jnp.int32 and out_k.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(out_q), cu_q)
    np.testing.assert_array_equal(np.asarray(out_k), cu_q if cu_k is None else cu_k)


def test_to_cu_seqlens_from_pairwise_mask():
    pair = MaskInfo.from_cu_seqlens(np.array([0, 2, 6]), seq_len_q=8).to_attention_mask()
    out_q, out_k = MaskInfo.from_attention_mask(pair).to_cu_seqlens()
    np.testing.assert_array_equal(np.asarray(out_q), [0, 2, 6])
    np.testing.assert_array_equal(np.asarray(out_k), [0, 2, 6])


def test_to_cu_seqlens_rejects_batch_2():
    with pytest.raises(ValueError, match=r"batch 1.*got batch 2"):
        MaskInfo.from_segments(np.array([[0, 0, 1], [0, 1, 1]])).to_cu_seqlens()


def test_to_cu_seqlens_rejects_non_contiguous():
    with pytest.raises(ValueError, match=r"segment 0 .*not contiguous"):
        MaskInfo.from_segments(np.array([[0, 0, 1, 1, 0]])).to_cu_seqlens()


def test_to_cu_seqlens_rejects_inner_padding():
    with pytest.raises(ValueError, match=r"padding .*must come last"):
        MaskInfo.from_segments(np.array([[0, 0, -1, 1, 1]])).to_cu_seqlens()
    with pytest.raises(ValueError, match=r"padding .*must come last"):
        MaskInfo.from_segments(np.array([[-1, 0, 0, 1, 1]])).to_cu_seqlens()


def test_to_cu_seqlens_rejects_reordered_segments():
    with pytest.raises(ValueError, match="segments differ"):
        MaskInfo.from_segments(np.array([[0, 0, 1, 1]]), np.array([[1, 1, 0, 0]])).to_cu_seqlens()


# -- pytree ----------------------------------------------------------------------------------


def test_pytree_leaves_and_structure(rng):
    seg = random_segments(rng, 2, 8)
    mi = MaskInfo.from_segments(seg).with_causal().with_sliding_window((2, 1))
    leaves = jax.tree.leaves(mi)
    assert len(leaves) == 2
    np.testing.assert_array_equal(np.asarray(leaves[0]), seg)
    np.testing.assert_array_equal(np.asarray(leaves[1]), seg)
    pair = MaskInfo.from_attention_mask(rng.random((1, 1, 4, 4)) < 0.5)
    assert len(jax.tree.leaves(pair)) == 1
    assert jax.tree.leaves(MaskInfo().with_causal()) == []
    # Static fields are part of the tree structure (a change retraces under jit).
    assert jax.tree.structure(mi) != jax.tree.structure(MaskInfo.from_segments(seg))


def test_pytree_through_jit(rng):
    seg = random_segments(rng, 2, 8)
    mi = MaskInfo.from_segments(seg).with_causal().with_sliding_window((2, 1))
    seen = {}

    @jax.jit
    def f(m):
        seen["causal"], seen["window"] = m.causal, m.sliding_window
        assert isinstance(m.q_segment_ids, jax.core.Tracer)
        return m, m.to_attention_mask()

    out, mask = f(mi)
    assert seen == {"causal": True, "window": (2, 1)}
    assert isinstance(out, MaskInfo)
    assert out.causal is True and out.sliding_window == (2, 1)
    np.testing.assert_array_equal(np.asarray(out.q_segment_ids), seg)
    np.testing.assert_array_equal(np.asarray(mask), np.asarray(mi.to_attention_mask()))


def test_pytree_tree_map(rng):
    seg = random_segments(rng, 2, 8)
    mi = MaskInfo.from_segments(seg, seg[:, :6]).with_sliding_window(3)
    shifted = jax.tree.map(lambda x: x + 10, mi)
    assert isinstance(shifted, MaskInfo)
    assert shifted.sliding_window == (3, 3) and shifted.causal is False
    np.testing.assert_array_equal(np.asarray(shifted.q_segment_ids), seg + 10)
    np.testing.assert_array_equal(np.asarray(shifted.kv_segment_ids), seg[:, :6] + 10)


# -- end to end ------------------------------------------------------------------------------

B, S, H, D = 2, 24, 2, 16


def qkv(rng, b=B, sq=S, sk=S, h=H, hk=H, d=D):
    return tuple(
        jnp.asarray(rng.standard_normal(shape), jnp.float32)
        for shape in ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d))
    )


def close(a, b, atol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=atol, rtol=1e-5)


def test_flash_segments_equal_pairwise_and_reference(rng):
    q, k, v = qkv(rng)
    mi = MaskInfo.from_segments(random_segments(rng, B, S))
    pair = MaskInfo.from_attention_mask(mi.to_attention_mask())
    assert pair.has_pairwise and not pair.has_segments
    out_seg = ejkernel.flash_attention(q, k, v, mask_info=mi)
    out_pair = ejkernel.flash_attention(q, k, v, mask_info=pair)
    ref = attention_reference(q, k, v, mask_info=mi)
    close(out_seg, out_pair)
    close(out_seg, ref)
    # Padding rows attend nothing: zeros, not NaN.
    assert np.all(np.asarray(out_seg[:, -2:]) == 0)
    # The mask matters: without it the output differs.
    assert not np.allclose(np.asarray(out_seg), np.asarray(ejkernel.flash_attention(q, k, v)), atol=1e-3)


def test_flash_cross_lengths_segments_and_patterns(rng):
    q, k, v = qkv(rng, sq=16, sk=24, hk=1)
    q_seg = random_segments(rng, B, 16, pad=1)
    kv_seg = random_segments(rng, B, 24, pad=3)
    mi = MaskInfo.from_segments(q_seg, kv_seg).with_causal().with_sliding_window((6, 0))
    out = ejkernel.flash_attention(q, k, v, mask_info=mi)
    close(out, attention_reference(q, k, v, mask_info=mi))
    pair = MaskInfo.from_attention_mask(mi.to_attention_mask())
    close(ejkernel.flash_attention(q, k, v, mask_info=pair), out)


def test_flash_per_head_pairwise_mask(rng):
    q, k, v = qkv(rng)
    mi = MaskInfo.from_attention_mask(rng.random((B, H, S, S)) < 0.4)
    close(ejkernel.flash_attention(q, k, v, mask_info=mi), attention_reference(q, k, v, mask_info=mi))


def test_flash_mask_info_causal_equals_causal_flag(rng):
    q, k, v = qkv(rng)
    mi = MaskInfo.from_segments(random_segments(rng, B, S))
    a = ejkernel.flash_attention(q, k, v, mask_info=mi.with_causal())
    b = ejkernel.flash_attention(q, k, v, mask_info=mi, causal=True)
    close(a, b, atol=1e-6)
    close(a, attention_reference(q, k, v, mask_info=mi, causal=True))
    # Pattern-only MaskInfo.with_causal() equals plain causal=True.
    close(
        ejkernel.flash_attention(q, k, v, mask_info=MaskInfo().with_causal()),
        ejkernel.flash_attention(q, k, v, causal=True),
    )


def test_flash_window_contradicting_mask_info_rejected(rng):
    q, k, v = qkv(rng)
    mi = MaskInfo.from_segments(random_segments(rng, B, S)).with_sliding_window((4, 1))
    with pytest.raises(ValueError, match=r"sliding_window=\(4, 4\) contradicts mask_info's sliding window \(4, 1\)"):
        ejkernel.flash_attention(q, k, v, mask_info=mi, sliding_window=4)


def test_flash_window_same_as_mask_info_accepted(rng):
    q, k, v = qkv(rng)
    mi = MaskInfo.from_segments(random_segments(rng, B, S)).with_sliding_window((3, 3))
    a = ejkernel.flash_attention(q, k, v, mask_info=mi, sliding_window=3)
    b = ejkernel.flash_attention(q, k, v, mask_info=mi)
    c = ejkernel.flash_attention(q, k, v, mask_info=mi, sliding_window=(3, 3))
    close(a, b, atol=0)
    close(a, c, atol=0)
    close(a, attention_reference(q, k, v, mask_info=mi))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"q_segment_ids": jnp.ones((1, 4)), "kv_segment_ids": jnp.ones((1, 4))}, TypeError, "integer dtype"),
        ({"q_segment_ids": jnp.ones((4,), jnp.int32), "kv_segment_ids": jnp.ones((4,), jnp.int32)}, ValueError, "2-D"),
        ({"attention_mask": jnp.ones((1, 1, 4, 4))}, TypeError, "must be a bool array"),
        ({"attention_mask": jnp.ones((4, 4), bool)}, ValueError, "must be 4-D.*from_attention_mask"),
    ],
    ids=["float-segments", "1d-segments", "float-mask", "2d-mask"],
)
def test_the_constructor_validates(kwargs, error, match):
    """MaskInfo(...) called directly checks what the constructors check: no float ids or masks,
    no mask of a rank the ops cannot read."""
    with pytest.raises(error, match=match):
        MaskInfo(**kwargs)


def test_from_attention_mask_rejects_a_float_mask():
    with pytest.raises(TypeError, match="bool or integer"):
        MaskInfo.from_attention_mask(np.ones((2, 4), np.float32))


def test_a_mask_info_still_maps_as_a_pytree():
    """JAX rebuilds MaskInfo from non-array leaves (specs, axis numbers): not validated then."""
    mi = MaskInfo.from_segments(np.zeros((2, 4), np.int32))
    specs = jax.tree.map(lambda _: 0, mi)
    assert specs.q_segment_ids == 0
    out = jax.vmap(lambda m: m.q_segment_ids + 1)(mi)
    assert out.shape == (2, 4)
