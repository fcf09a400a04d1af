"""``MaskInfo`` members of the older ejkernel API (issue 17: a drop-in for existing users).

Written from the documented signatures and examples of the older ``ejkernel.types.MaskInfo`` /
``ejkernel/types/mask.py``. Each member is checked against a naive NumPy construction of the mask
it should describe (random inputs, odd sizes, batch > 1, ``-1`` padding anywhere, under ``jit``
where that matters). Where this ejkernel deliberately differs (causal, windows and chunks aligned
bottom-right when ``q_len != kv_len``), the references encode this ejkernel's rule.
"""

from __future__ import annotations

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.testing import attention_reference
from ejkernel.types import MaskInfo
from ejkernel.types import mask as mask_module

# -- naive references -------------------------------------------------------------------------


def random_ids(rng, b, s, n_seg=3, p_pad=0.2):
    """Unsorted segment ids ``[b, s]`` in ``0..n_seg-1`` with ``-1`` padding anywhere."""
    ids = rng.integers(0, n_seg, (b, s))
    return np.where(rng.random((b, s)) < p_pad, -1, ids).astype(np.int32)


def np_segment_mask(q, kv):
    """``[b, 1, q, kv]``: equal ids attend; negative ids are padding."""
    q, kv = np.asarray(q), np.asarray(kv)
    out = np.zeros((q.shape[0], 1, q.shape[1], kv.shape[1]), bool)
    for b in range(q.shape[0]):
        for i in range(q.shape[1]):
            for j in range(kv.shape[1]):
                out[b, 0, i, j] = q[b, i] >= 0 and kv[b, j] >= 0 and q[b, i] == kv[b, j]
    return out


def np_rule(sq, sk, rule):
    """``[sq, sk]`` with ``rule(p, j)``; ``p = i + sk - sq`` is the query's key position (bottom-right)."""
    out = np.zeros((sq, sk), bool)
    for i in range(sq):
        for j in range(sk):
            out[i, j] = rule(i + sk - sq, j)
    return out


def np_causal(sq, sk, offset=0):
    return np_rule(sq, sk, lambda p, j: j <= p + offset)


def np_window(sq, sk, left, right, offset=0):
    return np_rule(sq, sk, lambda p, j: p + offset - left <= j <= p + offset + right)


def np_chunked(sq, sk, chunk, offset=0):
    return np_rule(sq, sk, lambda p, j: j <= p + offset and (p + offset) // chunk == j // chunk)


def np_positions(ids):
    """Restart at 0 at each segment boundary (a change of id, or a token after padding); padding -1."""
    ids = np.asarray(ids)
    out = np.full(ids.shape, -1, np.int32)
    for b in range(ids.shape[0]):
        count, prev = -1, None
        for t, s in enumerate(ids[b]):
            if s < 0:
                prev = None
                continue
            count = 0 if s != prev else count + 1
            out[b, t], prev = count, s
    return out


def np_group_rows(m):
    """Ids of identical rows of a 2-D bool array: contiguous in order of first appearance; empty rows -1."""
    m = np.asarray(m, bool)
    ids, seen = np.full(m.shape[0], -1, np.int32), []
    for i, row in enumerate(m):
        if not row.any():
            continue
        for g, rep in enumerate(seen):
            if np.array_equal(rep, row):
                ids[i] = g
                break
        else:
            ids[i] = len(seen)
            seen.append(row)
    return ids


def rows_from_pool(rng, n, m, pool=3, p_empty=0.2):
    """``[n, m]`` bool whose rows repeat (drawn from a small pool), some all-false."""
    base = rng.random((pool, m)) < 0.5
    rows = base[rng.integers(0, pool, n)]
    rows[rng.random(n) < p_empty] = False
    return rows


def eq(a, b):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# -- the module ejkernel.types.mask -----------------------------------------------------------


def test_mask_module_exposes_the_documented_names():
    from ejkernel.types import mask as m

    assert m.MaskInfo is MaskInfo is ejkernel.MaskInfo
    for name in ("segment_ids_to_mask", "segment_ids_to_qkv_masks", "mask_to_segment_ids"):
        assert callable(getattr(m, name)) and name in m.__all__
    assert ejkernel.types.set_debug_mode is m.set_debug_mode
    assert ejkernel.types.get_debug_mode is m.get_debug_mode


@pytest.mark.parametrize(
    "name",
    [
        "qkv_masks_to_cu_seqlens",
        "qkv_cu_seqlens_to_qkv_masks",
        "qkv_cu_seqlens_to_attention_mask",
        "attention_mask_to_qkv_cu_seqlens",
        "cu_seqlens_to_mask",
    ],
)
def test_cu_seqlens_helpers_say_what_to_use(name):
    with pytest.raises(NotImplementedError, match=rf"{name} .*MaskInfo\.from_cu_seqlens"):
        getattr(mask_module, name)(jnp.array([0, 3]))


def test_debug_mode_traces_calls(capsys):
    assert mask_module.get_debug_mode() is False
    mask_module.set_debug_mode(True)
    try:
        assert mask_module.get_debug_mode() is True
        MaskInfo.from_segments(np.zeros((1, 3), np.int32)).apply_causal()
        out = capsys.readouterr().out
        assert "[MaskInfo Debug] Calling MaskInfo.from_segments()" in out
        assert "[MaskInfo Debug] Calling MaskInfo.apply_causal()" in out
    finally:
        mask_module.set_debug_mode(False)
    MaskInfo.from_segments(np.zeros((1, 3), np.int32))
    assert capsys.readouterr().out == ""
    with pytest.raises(TypeError, match="enabled must be a bool"):
        mask_module.set_debug_mode("yes")


# -- segment_ids_to_mask / segment_ids_to_qkv_masks -------------------------------------------


def test_segment_ids_to_mask_documented_examples():
    seg = jnp.array([[1, 1, 2, 2, -1], [1, 1, 1, -1, -1]])
    m = mask_module.segment_ids_to_mask(seg)
    assert m.shape == (2, 1, 5, 5) and m.dtype == jnp.bool_
    eq(m, np_segment_mask(seg, seg))
    q_mask, kv_mask, attn = mask_module.segment_ids_to_mask(seg, return_separate_masks=True)
    assert (q_mask.shape, kv_mask.shape, attn.shape) == ((2, 5), (2, 5), (2, 1, 5, 5))
    eq(q_mask[0], [True, True, True, True, False])
    cross = mask_module.segment_ids_to_mask((jnp.array([[1, 2, 3]]), jnp.array([[1, 1, 2, 2, 3]])))
    assert cross.shape == (1, 1, 3, 5)
    eq(cross[0, 0], [[1, 1, 0, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 0, 1]])
    f = mask_module.segment_ids_to_mask(seg, dtype=jnp.float32)
    assert f.dtype == jnp.float32
    eq(f, np_segment_mask(seg, seg).astype(np.float32))


@pytest.mark.parametrize(("b", "sq", "sk"), [(1, 7, 7), (3, 5, 9), (2, 11, 3)])
def test_segment_ids_to_mask_random(rng, b, sq, sk):
    q, kv = random_ids(rng, b, sq), random_ids(rng, b, sk)
    q_mask, kv_mask, attn = jax.jit(
        lambda a, c: mask_module.segment_ids_to_mask((a, c), dtype=jnp.int32, return_separate_masks=True)
    )(q, kv)
    eq(attn, np_segment_mask(q, kv).astype(np.int32))
    eq(q_mask, (q >= 0).astype(np.int32))
    eq(kv_mask, (kv >= 0).astype(np.int32))


def test_segment_ids_to_qkv_masks_documented_examples(rng):
    q_mask, kv_mask, attn = mask_module.segment_ids_to_qkv_masks(jnp.array([[1, 1, 2, -1]]))
    assert (q_mask.shape, kv_mask.shape, attn.shape) == ((1, 4), (1, 4), (1, 1, 4, 4))
    eq(q_mask[0], [True, True, True, False])
    assert not bool(attn[0, 0, 0, 2])
    q_mask, kv_mask, attn = mask_module.segment_ids_to_qkv_masks(jnp.array([[1, 2]]), jnp.array([[1, 1, 2, 2, -1]]))
    assert (q_mask.shape, kv_mask.shape, attn.shape) == ((1, 2), (1, 5), (1, 1, 2, 5))
    eq(kv_mask[0], [True, True, True, True, False])
    assert bool(attn[0, 0, 0, :2].all())
    q, kv = random_ids(rng, 3, 6), random_ids(rng, 3, 10)
    out = mask_module.segment_ids_to_qkv_masks(q, kv, dtype=jnp.float32)
    eq(out[2], np_segment_mask(q, kv).astype(np.float32))


@pytest.mark.parametrize(
    ("arg", "error", "match"),
    [
        (np.zeros((4,), np.int32), ValueError, r"segment_ids must be 2-D"),
        (np.zeros((2, 4), np.float32), TypeError, r"segment_ids must have an integer dtype"),
        ((np.zeros((2, 4), np.int32),) * 3, ValueError, r"pair"),
        ((np.zeros((2, 4), np.int32), np.zeros((3, 4), np.int32)), ValueError, r"differ in batch size"),
    ],
)
def test_segment_ids_to_mask_validates(arg, error, match):
    with pytest.raises(error, match=match):
        mask_module.segment_ids_to_mask(arg)


# -- mask_to_segment_ids ----------------------------------------------------------------------


def test_mask_to_segment_ids_documented_example():
    q_ids, kv_ids = mask_module.mask_to_segment_ids(jnp.array([[1, 1, 0], [1, 1, 0], [0, 0, 1]], bool))
    eq(q_ids, [0, 0, 1])
    eq(kv_ids, [0, 0, 1])
    q_ids, kv_ids = mask_module.mask_to_segment_ids(jnp.array([[[1, 1, 0], [1, 1, 0], [0, 0, 1]]]))
    assert q_ids.shape == kv_ids.shape == (1, 3)


@pytest.mark.slow
@pytest.mark.parametrize(("sq", "sk"), [(7, 5), (9, 45), (33, 70)])
def test_mask_to_segment_ids_random(rng, sq, sk):
    m3 = np.stack([rows_from_pool(rng, sq, sk) for _ in range(3)])
    q_ids, kv_ids = jax.jit(mask_module.mask_to_segment_ids)(m3)
    assert q_ids.dtype == jnp.int32 and q_ids.shape == (3, sq) and kv_ids.shape == (3, sk)
    for b in range(3):
        eq(q_ids[b], np_group_rows(m3[b]))
        eq(kv_ids[b], np_group_rows(m3[b].T))
    q2, kv2 = mask_module.mask_to_segment_ids(m3[0].astype(np.int32))
    eq(q2, np_group_rows(m3[0]))
    eq(kv2, np_group_rows(m3[0].T))
    m4 = np.stack([np.stack([rows_from_pool(rng, sq, sk) for _ in range(2)]) for _ in range(3)])
    q_ids, kv_ids = mask_module.mask_to_segment_ids(m4)  # head 0 decides
    eq(q_ids, np.stack([np_group_rows(m4[b, 0]) for b in range(3)]))
    q_ids, kv_ids = mask_module.mask_to_segment_ids(m4, per_head=True)
    assert q_ids.shape == (3, 2, sq) and kv_ids.shape == (3, 2, sk)
    for b in range(3):
        for h in range(2):
            eq(q_ids[b, h], np_group_rows(m4[b, h]))
            eq(kv_ids[b, h], np_group_rows(m4[b, h].T))


def test_mask_to_segment_ids_validates():
    with pytest.raises(ValueError, match=r"mask must be .*got shape \(4,\)"):
        mask_module.mask_to_segment_ids(np.ones((4,), bool))
    with pytest.raises(TypeError, match="mask must be bool or integer"):
        mask_module.mask_to_segment_ids(np.ones((2, 2), np.float32))
    with pytest.raises(TypeError, match="per_head must be a bool"):
        mask_module.mask_to_segment_ids(np.ones((2, 2), bool), per_head=1)


# -- from_segments ----------------------------------------------------------------------------


def test_from_segments_documented_example():
    seg = jnp.array([[1, 1, 2, 2, -1]])
    mi = MaskInfo.from_segments(seg)
    assert mi.attention_mask.shape == (1, 1, 5, 5)
    eq(mi.attention_mask, np_segment_mask(seg, seg))
    # Kernels keep receiving segment ids; the pairwise mask is computed, not stored.
    assert mi.stored_attention_mask is None and mi.has_segments and not mi.has_pairwise
    eq(mi.q_segment_ids, seg)
    eq(mi.kv_segment_ids, seg)


@pytest.mark.parametrize(("b", "sq", "sk"), [(1, 5, 5), (3, 7, 7), (2, 5, 11), (3, 9, 4)])
def test_from_segments_attention_mask_random(rng, b, sq, sk):
    q = random_ids(rng, b, sq)
    kv = q if sq == sk and b != 2 else random_ids(rng, b, sk)
    mi = MaskInfo.from_segments(q, None if kv is q else kv)
    eq(mi.attention_mask, np_segment_mask(q, kv))
    eq(jax.jit(lambda m: m.attention_mask)(mi), np_segment_mask(q, kv))
    eq(jax.jit(lambda a, c: MaskInfo.from_segments(a, c).attention_mask)(q, kv), np_segment_mask(q, kv))


def test_from_segments_positions_and_axis_names(rng):
    q, kv = random_ids(rng, 2, 5), random_ids(rng, 2, 7)
    q_pos = rng.integers(0, 50, (2, 5)).astype(np.int32)
    kv_pos = rng.integers(0, 50, (2, 7)).astype(np.int64)
    positional = MaskInfo.from_segments(q, kv, q_pos, kv_pos, ("data",), "model", "model", None)
    keywords = MaskInfo.from_segments(
        q,
        kv,
        q_positions=q_pos,
        kv_positions=kv_pos,
        batch_axis_name=("data",),
        qheads_axis_name="model",
        kvheads_axis_name="model",
        sequence_axis_name=None,
    )
    for mi in (positional, keywords):
        eq(mi.q_positions, q_pos)
        eq(mi.kv_positions, kv_pos)
        assert mi.kv_positions.dtype == jnp.int32
        assert (mi.batch_axis_name, mi.qheads_axis_name, mi.kvheads_axis_name, mi.sequence_axis_name) == (
            ("data",),
            "model",
            "model",
            None,
        )
    default = MaskInfo.from_segments(q)
    assert default.batch_axis_name == ("dp", "fsdp") and default.qheads_axis_name == "tp"
    assert default.kvheads_axis_name == "tp" and default.sequence_axis_name == "sp"
    assert default.q_positions is None and default.kv_positions is None


@pytest.mark.parametrize("dtype", [bool, np.int32])
def test_from_segments_is_attn_mask(rng, dtype):
    q_pad = (rng.random((3, 6)) < 0.7).astype(dtype)
    kv_pad = (rng.random((3, 9)) < 0.7).astype(dtype)
    mi = MaskInfo.from_segments(q_pad, kv_pad, is_attn_mask=True)
    eq(mi.q_segment_ids, np.where(q_pad != 0, 0, -1))
    eq(mi.kv_segment_ids, np.where(kv_pad != 0, 0, -1))
    outer = (q_pad != 0)[:, None, :, None] & (kv_pad != 0)[:, None, None, :]
    eq(mi.attention_mask, outer)
    self_mi = MaskInfo.from_segments(q_pad, is_attn_mask=True)
    eq(self_mi.attention_mask, (q_pad != 0)[:, None, :, None] & (q_pad != 0)[:, None, None, :])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"q_positions": np.zeros((2, 4), np.int32)}, ValueError, r"q_positions \(2, 4\) must have the shape"),
        ({"kv_positions": np.zeros((2, 5), np.float32)}, TypeError, r"kv_positions must have an integer dtype"),
        ({"q_positions": np.zeros((5,), np.int32)}, ValueError, r"q_positions must be 2-D"),
        ({"batch_axis_name": 3}, TypeError, r"batch_axis_name"),
        ({"sequence_axis_name": ("sp", 1)}, TypeError, r"sequence_axis_name"),
        ({"is_attn_mask": 1}, TypeError, r"is_attn_mask must be a bool"),
    ],
)
def test_from_segments_validates_new_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        MaskInfo.from_segments(np.zeros((2, 5), np.int32), **kwargs)


def test_from_segments_is_attn_mask_rejects_float():
    with pytest.raises(TypeError, match="q_segment_ids must be bool or integer"):
        MaskInfo.from_segments(np.ones((1, 3), np.float32), is_attn_mask=True)


# -- from_attention_mask ----------------------------------------------------------------------


def test_from_attention_mask_argument_names(rng):
    m = rng.random((2, 1, 4, 6)) < 0.5
    for mi in (MaskInfo.from_attention_mask(m), MaskInfo.from_attention_mask(attention_mask=m)):
        eq(mi.attention_mask, m)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mi = MaskInfo.from_attention_mask(mask=m)
    eq(mi.attention_mask, m)
    (w,) = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert "attention_mask" in str(w.message) and w.filename == __file__
    with pytest.raises(TypeError, match="not both"):
        MaskInfo.from_attention_mask(m, mask=m)
    with pytest.raises(TypeError, match="missing required argument: 'attention_mask'"):
        MaskInfo.from_attention_mask()


def test_from_attention_mask_2d_gives_padding_segments_and_pairwise_mask(rng):
    pad = rng.random((3, 7)) < 0.6
    q_pos = np.arange(7, dtype=np.int32)[None].repeat(3, 0)
    mi = MaskInfo.from_attention_mask(pad.astype(np.int32), q_pos)
    eq(mi.q_segment_ids, np.where(pad, 0, -1))
    eq(mi.kv_segment_ids, np.where(pad, 0, -1))
    assert mi.attention_mask.shape == (3, 1, 7, 7)
    eq(mi.attention_mask, pad[:, None, :, None] & pad[:, None, None, :])
    eq(mi.q_positions, q_pos)


def test_from_attention_mask_3d_4d_and_mask_is_valid(rng):
    m3 = rng.random((2, 5, 8)) < 0.5
    mi = MaskInfo.from_attention_mask(m3)
    assert mi.q_segment_ids is None and mi.kv_segment_ids is None  # lazy, as documented
    eq(mi.stored_attention_mask, m3[:, None])
    m4 = rng.random((2, 3, 5, 8)) < 0.5
    eq(MaskInfo.from_attention_mask(m4).attention_mask, m4)
    eq(MaskInfo.from_attention_mask(m4, mask_is_valid=False).attention_mask, ~m4)
    pad = rng.random((2, 5)) < 0.5
    eq(MaskInfo.from_attention_mask(pad, mask_is_valid=False).q_segment_ids, np.where(pad, -1, 0))
    with pytest.raises(TypeError, match="mask_is_valid must be a bool"):
        MaskInfo.from_attention_mask(m4, mask_is_valid="no")


# -- from_random ------------------------------------------------------------------------------


def test_from_random_documented_examples():
    mi = MaskInfo.from_random(batch_size=2, q_len=128, sparsity=0.7, seed=42)
    assert mi.attention_mask.shape == (2, 1, 128, 128)
    mi = MaskInfo.from_random(batch_size=1, q_len=64, kv_len=128, sparsity=0.5, seed=0)
    assert mi.attention_mask.shape == (1, 1, 64, 128)


@pytest.mark.parametrize(("b", "sq", "sk", "sparsity", "seed"), [(3, 7, None, 0.3, 5), (2, 5, 13, 0.8, 1)])
def test_from_random_values(b, sq, sk, sparsity, seed):
    mi = MaskInfo.from_random(b, sq, sk, sparsity, seed)
    want = jax.random.bernoulli(jax.random.PRNGKey(seed), 1.0 - sparsity, (b, 1, sq, sq if sk is None else sk))
    eq(mi.attention_mask, want)
    assert mi.shape == (b, sq, sq if sk is None else sk)
    eq(MaskInfo.from_random(b, sq, sk, sparsity, seed).attention_mask, mi.attention_mask)  # reproducible
    assert not np.array_equal(np.asarray(MaskInfo.from_random(b, sq, sk, sparsity, seed + 1).attention_mask), want)
    assert bool(MaskInfo.from_random(b, sq, sk, 0.0).attention_mask.all())
    assert not bool(MaskInfo.from_random(b, sq, sk, 1.0).attention_mask.any())


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((2, 4), {"sparsity": 1.5}, ValueError, r"sparsity must be in \[0, 1\]"),
        ((2, 4), {"sparsity": -0.1}, ValueError, r"sparsity must be in \[0, 1\]"),
        ((0, 4), {}, ValueError, r"batch_size must be >= 1"),
        ((2, 2.5), {}, TypeError, r"q_len must be an int"),
        ((2, 4), {"kv_len": True}, TypeError, r"kv_len must be an int"),
        ((2, 4), {"sparsity": "half"}, TypeError, r"sparsity must be a number"),
    ],
)
def test_from_random_validates(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        MaskInfo.from_random(*args, **kwargs)


# -- sizes, self-attention, dtype, replace ----------------------------------------------------


def test_q_len_kv_len_shape(rng):
    mi = MaskInfo.from_segments(random_ids(rng, 3, 5), random_ids(rng, 3, 9))
    assert (mi.q_len, mi.kv_len, mi.shape) == (5, 9, (3, 5, 9))
    mi = MaskInfo.from_attention_mask(rng.random((2, 4, 6)) < 0.5)
    assert (mi.q_len, mi.kv_len, mi.shape) == (4, 6, (2, 4, 6))
    mi = MaskInfo().with_causal()
    assert (mi.q_len, mi.kv_len, mi.shape) == (None, None, (None, None, None))


def test_is_self_attention(rng):
    q = random_ids(rng, 2, 6)
    assert MaskInfo.from_segments(q).is_self_attention() is True
    assert MaskInfo.from_segments(q, q.copy()).is_self_attention() is True
    other = q.copy()
    other[0, 0] = 7
    assert MaskInfo.from_segments(q, other).is_self_attention() is False
    assert MaskInfo.from_segments(q, random_ids(rng, 2, 7)).is_self_attention() is False
    assert MaskInfo.from_attention_mask(rng.random((2, 5, 5)) < 0.5).is_self_attention() is True
    assert MaskInfo.from_attention_mask(rng.random((2, 5, 6)) < 0.5).is_self_attention() is False
    assert MaskInfo().is_self_attention() is False
    traced = jax.jit(lambda a, c: MaskInfo.from_segments(a, c).is_self_attention())
    assert bool(traced(q, q.copy())) and not bool(traced(q, other))


def test_to_dtype(rng):
    mi = MaskInfo.from_segments(random_ids(rng, 2, 5))
    assert mi.to_dtype(jnp.bool_) is mi
    with pytest.raises(TypeError, match=r"get_or_compute_attention_mask\(dtype\)"):
        mi.to_dtype(jnp.float32)
    with pytest.raises(TypeError, match="dtype must be a dtype"):
        mi.to_dtype("not-a-dtype")


def test_replace(rng):
    q, kv = random_ids(rng, 2, 5), random_ids(rng, 2, 7)
    mi = MaskInfo.from_segments(q, kv)
    new_mask = rng.random((2, 1, 5, 7)) < 0.5
    r = mi.replace(attention_mask=new_mask)
    eq(r.stored_attention_mask, new_mask)
    eq(r.attention_mask, np_segment_mask(q, kv) & new_mask)  # everything combines with AND
    assert mi.stored_attention_mask is None  # the original is untouched
    q2, kv2 = random_ids(rng, 2, 5), random_ids(rng, 2, 7)
    r = mi.replace(q_segment_ids=q2, kv_segment_ids=kv2, q_positions=np.zeros((2, 5), np.int32), causal=True)
    eq(r.q_segment_ids, q2)
    eq(r.kv_segment_ids, kv2)
    eq(r.q_positions, np.zeros((2, 5)))
    assert r.causal is True
    same = mi.replace(attention_mask=None, q_segment_ids=None)  # None keeps the field
    eq(same.q_segment_ids, q)
    assert mi.replace(batch_axis_name="data").batch_axis_name == "data"
    assert mi.replace(sliding_window=3).sliding_window == (3, 3)
    with pytest.raises(TypeError, match=r"unknown field\(s\) \['bogus'\]"):
        mi.replace(bogus=1)
    with pytest.raises(TypeError, match="must be a bool array"):
        mi.replace(attention_mask=new_mask.astype(np.float32))
    with pytest.raises(ValueError, match=r"q_positions \(2, 4\) must be \[batch, seq_q\]"):
        mi.replace(q_positions=np.zeros((2, 4), np.int32))


# -- mask / segment / position queries --------------------------------------------------------


@pytest.mark.parametrize(("b", "sq", "sk"), [(3, 7, 7), (2, 5, 9)])
def test_get_qkv_masks(rng, b, sq, sk):
    q, kv = random_ids(rng, b, sq), random_ids(rng, b, sk)
    q_mask, kv_mask, attn = MaskInfo.from_segments(q, kv).get_qkv_masks()
    eq(q_mask, q >= 0)
    eq(kv_mask, kv >= 0)
    eq(attn, np_segment_mask(q, kv))
    q_mask, _, attn = MaskInfo.from_segments(q, kv).with_causal().get_qkv_masks(jnp.float32)
    assert q_mask.dtype == attn.dtype == jnp.float32
    eq(attn, (np_segment_mask(q, kv) & np_causal(sq, sk)).astype(np.float32))
    m = rng.random((b, 1, sq, sk)) < 0.2
    m[:, :, 0] = False
    q_mask, kv_mask, attn = MaskInfo.from_attention_mask(m).get_qkv_masks()
    eq(q_mask, m.any(axis=(1, 3)))
    eq(kv_mask, m.any(axis=(1, 2)))
    eq(attn, m)


def test_get_or_compute_attention_mask(rng):
    q, kv = random_ids(rng, 2, 6), random_ids(rng, 2, 9)
    stored = rng.random((2, 3, 6, 9)) < 0.7
    mi = MaskInfo.from_segments(q, kv).replace(attention_mask=stored).with_sliding_window((2, 1))
    want = np_segment_mask(q, kv) & stored & np_window(6, 9, 2, 1)
    eq(mi.get_or_compute_attention_mask(), want)
    eq(mi.get_or_compute_attention_mask(jnp.int32), want.astype(np.int32))
    assert mi.get_or_compute_attention_mask(jnp.float32).dtype == jnp.float32
    with pytest.raises(ValueError, match=r"only patterns; use to_attention_mask"):
        MaskInfo().with_causal().get_or_compute_attention_mask()


def test_get_or_compute_segment_ids(rng):
    q, kv = random_ids(rng, 2, 6), random_ids(rng, 2, 9)
    mi = MaskInfo.from_segments(q, kv)
    got_q, got_kv = mi.get_or_compute_segment_ids()
    assert got_q is mi.q_segment_ids and got_kv is mi.kv_segment_ids
    m = np.stack([np.stack([rows_from_pool(rng, 6, 9) for _ in range(2)]) for _ in range(2)])
    mi = MaskInfo.from_attention_mask(m)
    got_q, got_kv = mi.get_or_compute_segment_ids()
    eq(got_q, np.stack([np_group_rows(m[b, 0]) for b in range(2)]))
    eq(got_kv, np.stack([np_group_rows(m[b, 0].T) for b in range(2)]))
    got_q, got_kv = mi.get_or_compute_segment_ids(per_head=True)
    assert got_q.shape == (2, 2, 6) and got_kv.shape == (2, 2, 9)
    with pytest.raises(ValueError, match="only patterns"):
        MaskInfo().get_or_compute_segment_ids()
    with pytest.raises(TypeError, match="per_head must be a bool"):
        mi.get_or_compute_segment_ids(per_head=None)


def test_q_position_ids_documented_example():
    mi = MaskInfo.from_segments(jnp.array([[-1, -1, 0, 0, 0, 1, 1, -1]]))
    eq(mi.q_position_ids, [[-1, -1, 0, 1, 2, 0, 1, -1]])
    eq(mi.q_attention_mask, [[0, 0, 1, 1, 1, 1, 1, 0]])


@pytest.mark.parametrize(("b", "sq", "sk"), [(3, 9, 9), (2, 7, 12)])
def test_get_or_compute_positions(rng, b, sq, sk):
    q, kv = random_ids(rng, b, sq, n_seg=2, p_pad=0.25), random_ids(rng, b, sk, n_seg=2, p_pad=0.25)
    mi = MaskInfo.from_segments(q, kv)
    q_pos, kv_pos = mi.get_or_compute_positions()
    eq(q_pos, np_positions(q))
    eq(kv_pos, np_positions(kv))
    assert q_pos.dtype == kv_pos.dtype == jnp.int32
    eq(mi.q_position_ids, np_positions(q))
    q_pos_j, kv_pos_j = jax.jit(lambda m: m.get_or_compute_positions())(mi)
    eq(q_pos_j, np_positions(q))
    eq(kv_pos_j, np_positions(kv))
    given = rng.integers(0, 100, (b, sq)).astype(np.int32)
    q_pos, kv_pos = MaskInfo.from_segments(q, kv, q_positions=given).get_or_compute_positions()
    eq(q_pos, given)  # stored positions are returned as they are
    eq(kv_pos, np_positions(kv))
    # Without segment ids, tokens that attend / are attended by nothing are padding.
    pad_q, pad_kv = rng.random((b, sq)) < 0.7, rng.random((b, sk)) < 0.7
    m = pad_q[:, None, :, None] & pad_kv[:, None, None, :]
    q_pos, kv_pos = MaskInfo.from_attention_mask(m).get_or_compute_positions()
    eq(q_pos, np_positions(np.where(pad_q, 0, -1)))
    eq(kv_pos, np_positions(np.where(pad_kv, 0, -1)))
    assert MaskInfo().with_causal().get_or_compute_positions() == (None, None)


# -- apply_causal -----------------------------------------------------------------------------


def test_apply_causal_documented_example():
    mi = MaskInfo.from_segments(jnp.array([[1, 1, 1, 1]])).apply_causal()
    eq(mi.attention_mask[0, 0], np.tril(np.ones((4, 4), bool)))
    assert mi.causal is True and mi.stored_attention_mask is None  # a pattern the kernels apply


@pytest.mark.parametrize(("b", "sq", "sk"), [(3, 7, 7), (2, 5, 9), (2, 9, 4)])
@pytest.mark.parametrize("offset", [0, 2, -3])
def test_apply_causal_random(rng, b, sq, sk, offset):
    q, kv = random_ids(rng, b, sq), random_ids(rng, b, sk)
    mi = MaskInfo.from_segments(q, kv).apply_causal(offset)
    eq(mi.attention_mask, np_segment_mask(q, kv) & np_causal(sq, sk, offset))
    eq(mi.q_segment_ids, q)  # segment ids are kept
    assert mi.has_pairwise is (offset != 0)


def test_apply_causal_per_example_offsets(rng):
    q = random_ids(rng, 3, 7, p_pad=0.1)
    offsets = np.array([0, 2, -1], np.int32)
    causal = np.stack([np_causal(7, 7, int(o)) for o in offsets])[:, None]
    want = np_segment_mask(q, q) & causal
    eq(MaskInfo.from_segments(q).apply_causal(offsets).attention_mask, want)
    traced = jax.jit(lambda m, o: m.apply_causal(o).attention_mask)(MaskInfo.from_segments(q), jnp.asarray(offsets))
    eq(traced, want)
    m = rng.random((3, 2, 7, 7)) < 0.8
    eq(MaskInfo.from_attention_mask(m).apply_causal(offsets).attention_mask, m & causal)


def test_apply_causal_pattern_only_and_errors():
    mi = MaskInfo().apply_causal()
    eq(mi.to_attention_mask(3, 5)[0, 0], np_causal(3, 5))
    with pytest.raises(ValueError, match="holds only patterns"):
        MaskInfo().apply_causal(1)
    seg = MaskInfo.from_segments(np.zeros((2, 4), np.int32))
    with pytest.raises(TypeError, match="offset must be an int"):
        seg.apply_causal(1.5)
    with pytest.raises(TypeError, match="offset must be an int"):
        seg.apply_causal(True)
    with pytest.raises(ValueError, match=r"offset must be a scalar or one value per example \[batch=2\]"):
        seg.apply_causal(np.zeros((3,), np.int32))
    with pytest.raises(TypeError, match="offset must have an integer dtype"):
        seg.apply_causal(np.zeros((2,), np.float32))


# -- apply_sliding_window ---------------------------------------------------------------------


def test_apply_sliding_window_documented_examples():
    mi = MaskInfo.from_segments(jnp.array([[1, 1, 1, 1, 1, 1]]))
    sym = mi.apply_sliding_window(2)
    assert sym.sliding_window == (2, 2)
    eq(sym.attention_mask[0, 0], np_window(6, 6, 2, 2))
    asym = mi.apply_sliding_window((3, 1))
    eq(asym.attention_mask[0, 0], np_window(6, 6, 3, 1))
    decode = mi.apply_sliding_window(3, mode="decode", index=5)
    assert decode.attention_mask.shape == (1, 1, 1, 6)  # min(3 + 3 + 1, 6) keys
    prefill = mi.apply_sliding_window(4, mode="prefill")
    assert prefill.attention_mask.shape == (1, 1, 6, 6)


@pytest.mark.parametrize(("b", "sq", "sk"), [(3, 8, 8), (2, 5, 11), (2, 9, 6)])
@pytest.mark.parametrize("offset", [0, 2])
def test_apply_sliding_window_random(rng, b, sq, sk, offset):
    q, kv = random_ids(rng, b, sq, n_seg=2), random_ids(rng, b, sk, n_seg=2)
    mi = MaskInfo.from_segments(q, kv).apply_sliding_window((2, 1), offset=offset)
    eq(mi.attention_mask, np_segment_mask(q, kv) & np_window(sq, sk, 2, 1, offset))
    # Applying a second window intersects.
    twice = mi.apply_sliding_window((1, 3), offset=offset)
    eq(twice.attention_mask, np_segment_mask(q, kv) & np_window(sq, sk, 1, 1, offset))


def test_apply_sliding_window_per_example_offsets(rng):
    q = random_ids(rng, 3, 9, p_pad=0.1)
    offsets = np.array([0, -2, 3], np.int32)
    want = np_segment_mask(q, q) & np.stack([np_window(9, 9, 1, 2, int(o)) for o in offsets])[:, None]
    eq(MaskInfo.from_segments(q).apply_sliding_window((1, 2), offset=offsets).attention_mask, want)
    traced = jax.jit(lambda m, o: m.apply_sliding_window((1, 2), offset=o).attention_mask)
    eq(traced(MaskInfo.from_segments(q), jnp.asarray(offsets)), want)


@pytest.mark.parametrize(("sq", "sk", "window"), [(9, 9, (2, 1)), (5, 12, 2), (7, 7, (0, 0)), (4, 3, (3, 3))])
def test_apply_sliding_window_decode(rng, sq, sk, window):
    b = 3
    q, kv = random_ids(rng, b, sq, n_seg=2, p_pad=0.1), random_ids(rng, b, sk, n_seg=2, p_pad=0.1)
    kv_pos = rng.integers(0, 99, (b, sk)).astype(np.int32)
    index = rng.integers(0, sq, b).astype(np.int32)
    left, right = (window, window) if isinstance(window, int) else window
    width = min(left + right + 1, sk)
    full = (np_segment_mask(q, kv) & np_causal(sq, sk) & np_window(sq, sk, left, right))[:, 0]
    mi = MaskInfo.from_segments(q, kv, kv_positions=kv_pos).with_causal()
    for idx in (index, jnp.asarray(index)):
        out = mi.apply_sliding_window(window, mode="decode", index=idx)
        assert out.attention_mask.shape == (b, 1, 1, width)
        assert out.causal is False and out.sliding_window is None  # baked into the stored mask
        for e in range(b):
            start = int(np.clip(index[e] + sk - sq - left, 0, sk - width))
            eq(out.attention_mask[e, 0, 0], full[e, index[e], start : start + width])
            eq(out.q_segment_ids[e], q[e, index[e] : index[e] + 1])
            eq(out.kv_segment_ids[e], kv[e, start : start + width])
            eq(out.kv_positions[e], kv_pos[e, start : start + width])
    scalar = mi.apply_sliding_window(window, mode="decode", index=int(index[0]))
    start = int(np.clip(index[0] + sk - sq - left, 0, sk - width))
    eq(scalar.attention_mask[1, 0, 0], full[1, index[0], start : start + width])
    traced = jax.jit(lambda m, i: m.apply_sliding_window(window, mode="decode", index=i).attention_mask)
    eq(traced(mi, jnp.asarray(index)), mi.apply_sliding_window(window, mode="decode", index=index).attention_mask)


@pytest.mark.parametrize(("sq", "sk", "window", "offset"), [(9, 9, (3, 0), 0), (5, 11, 2, 0), (8, 8, (2, 1), 1)])
def test_apply_sliding_window_prefill(rng, sq, sk, window, offset):
    b = 2
    q, kv = random_ids(rng, b, sq, n_seg=2), random_ids(rng, b, sk, n_seg=2)
    left, right = (window, window) if isinstance(window, int) else window
    width = min(left + right + 1, sk)
    mi = MaskInfo.from_segments(q, kv).apply_sliding_window(window, offset=offset, mode="prefill")
    full = np_segment_mask(q, kv) & np_window(sq, sk, left, right, offset)
    eq(mi.attention_mask, full[..., sk - width :])
    eq(mi.kv_segment_ids, kv[:, sk - width :])
    eq(mi.q_segment_ids, q)


def test_apply_sliding_window_errors():
    mi = MaskInfo.from_segments(np.zeros((2, 6), np.int32))
    with pytest.raises(ValueError, match="mode must be None, 'default', 'decode' or 'prefill'"):
        mi.apply_sliding_window(2, mode="train")
    with pytest.raises(ValueError, match="needs index"):
        mi.apply_sliding_window(2, mode="decode")
    with pytest.raises(ValueError, match=r"index must be in \[0, q_len=6\)"):
        mi.apply_sliding_window(2, mode="decode", index=6)
    with pytest.raises(ValueError, match=r"index must be in \[0, q_len=6\)"):
        mi.apply_sliding_window(2, mode="decode", index=np.array([0, -1], np.int32))
    with pytest.raises(TypeError, match="sliding_window must be an int or a"):
        mi.apply_sliding_window(None)
    with pytest.raises(ValueError, match="sliding_window must be >= 0"):
        mi.apply_sliding_window(-1)
    with pytest.raises(TypeError, match="sliding_window left size must be an int"):
        mi.apply_sliding_window((1.5, 2))
    with pytest.raises(ValueError, match="holds only patterns"):
        MaskInfo().apply_sliding_window(2, mode="prefill")
    assert MaskInfo().apply_sliding_window(2).sliding_window == (2, 2)


# -- apply_chunked ----------------------------------------------------------------------------


@pytest.mark.parametrize(("b", "sq", "sk"), [(3, 9, 9), (2, 5, 11), (2, 10, 7)])
@pytest.mark.parametrize(("chunk", "offset"), [(1, 0), (3, 0), (4, 1), (3, -2)])
def test_apply_chunked_random(rng, b, sq, sk, chunk, offset):
    q, kv = random_ids(rng, b, sq, n_seg=2, p_pad=0.15), random_ids(rng, b, sk, n_seg=2, p_pad=0.15)
    mi = MaskInfo.from_segments(q, kv).apply_chunked(chunk, offset)
    eq(mi.attention_mask, np_segment_mask(q, kv) & np_chunked(sq, sk, chunk, offset))
    # The segment ids become chunk id + 1; padding (and queries before the first key) is -1.
    p = np.arange(sq) + sk - sq + offset
    eq(mi.q_segment_ids, np.where((q < 0) | (p < 0)[None], -1, (p // chunk + 1)[None]))
    eq(mi.kv_segment_ids, np.where(kv < 0, -1, (np.arange(sk) // chunk + 1)[None]))
    assert mi.q_segment_ids.dtype == jnp.int32


def test_apply_chunked_on_a_mask_and_errors(rng):
    m = rng.random((2, 1, 8, 8)) < 0.7
    m[:, :, 3] = False  # query 3 attends nothing: padding
    mi = MaskInfo.from_attention_mask(m).apply_chunked(3)
    eq(mi.attention_mask, m & np_chunked(8, 8, 3))
    assert (np.asarray(mi.q_segment_ids)[:, 3] == -1).all()
    seg = MaskInfo.from_segments(np.zeros((1, 4), np.int32))
    for bad, error in ((0, ValueError), (-2, ValueError), (2.0, TypeError), (True, TypeError)):
        with pytest.raises(error, match="chunk_size must be"):
            seg.apply_chunked(bad)
    with pytest.raises(ValueError, match="holds only patterns"):
        MaskInfo().apply_chunked(2)


def test_create_chunked_attention_mask():
    m = MaskInfo.create_chunked_attention_mask(chunk_size=4, q_len=8, kv_len=8)
    assert m.shape == (8, 8) and m.dtype == jnp.bool_
    eq(m, np_chunked(8, 8, 4))
    eq(MaskInfo.create_chunked_attention_mask(3, 5, 9, offset=1, dtype=jnp.int32), np_chunked(5, 9, 3, 1))
    with pytest.raises(ValueError, match="chunk_size must be > 0"):
        MaskInfo.create_chunked_attention_mask(0, 4)


# -- smaller members --------------------------------------------------------------------------


def test_dynamic_init_documented_example():
    input_ids = jnp.array([[1, 2, 3, 0], [4, 5, 0, 0]])
    attn = jnp.array([[1, 1, 1, 0], [1, 1, 0, 0]])
    mi = MaskInfo.dynamic_init(input_ids=input_ids, attention_mask=attn)
    assert mi.shape == (2, 4, 4)
    eq(mi.attention_mask, (attn == 1)[:, None, :, None] & (attn == 1)[:, None, None, :])
    assert MaskInfo.dynamic_init(mask_info=mi) is mi
    eq(MaskInfo.dynamic_init(inputs_embeds=jnp.zeros((3, 5, 2))).attention_mask, np.ones((3, 1, 5, 5), bool))
    with pytest.raises(ValueError, match="pass one of"):
        MaskInfo.dynamic_init()


def test_bias_and_create_bias(rng):
    q = random_ids(rng, 2, 6)
    mi = MaskInfo.from_segments(q).with_causal()
    want = np_segment_mask(q, q) & np_causal(6, 6)
    eq(mi.bias, np.where(want, 0.0, np.finfo(np.float32).min).astype(np.float32))
    b16 = mi.create_bias(jnp.bfloat16)
    assert b16.dtype == jnp.bfloat16
    eq(b16 == 0, want)
    with pytest.raises(TypeError, match="floating dtype"):
        mi.create_bias(jnp.int32)


def test_is_multi_sequence_documented_examples():
    assert not bool(MaskInfo.from_segments(jnp.array([[0, 0, 0, -1, -1]])).is_multi_sequence)
    assert bool(MaskInfo.from_segments(jnp.array([[0, 0, 1, 1, -1]])).is_multi_sequence)
    assert not bool(MaskInfo.from_segments(jnp.array([[1, 1, -1], [2, 2, 2]])).is_multi_sequence)
    assert bool(jax.jit(lambda s: MaskInfo.from_segments(s).is_multi_sequence)(jnp.array([[1, 2, -1]])))


def test_materialize(rng):
    q = random_ids(rng, 2, 5)
    mi = MaskInfo.from_segments(q).with_causal()
    mat = mi.materialize_attention_mask()
    eq(mat.stored_attention_mask, np_segment_mask(q, q) & np_causal(5, 5))
    eq(mat.attention_mask, mi.attention_mask)
    with pytest.raises(TypeError, match="stores bool masks"):
        mi.materialize_attention_mask(jnp.float32)
    assert mi.materialize_segment_ids() is mi
    m = rng.random((2, 1, 5, 5)) < 0.3
    m[:, :, 1] = False
    seg = MaskInfo.from_attention_mask(m).materialize_segment_ids()
    eq(seg.q_segment_ids, np.where(m.any(axis=(1, 3)), 0, -1))
    eq(seg.attention_mask, m)  # padding-style ids keep the mask's meaning
    with pytest.raises(ValueError, match="per_head=True"):
        MaskInfo.from_attention_mask(m).materialize_segment_ids(per_head=True)


# -- pytree and construction ------------------------------------------------------------------


def test_pytree_with_positions_and_axis_names(rng):
    q, kv = random_ids(rng, 2, 5), random_ids(rng, 2, 7)
    q_pos = rng.integers(0, 9, (2, 5)).astype(np.int32)
    mi = MaskInfo.from_segments(q, kv, q_positions=q_pos, batch_axis_name="data").apply_causal(1)
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(mi)[0]]
    assert paths == [".q_segment_ids", ".kv_segment_ids", ".stored_attention_mask", ".q_positions"]
    out = jax.jit(lambda m: m)(mi)
    assert isinstance(out, MaskInfo) and out.batch_axis_name == "data"
    eq(out.q_positions, q_pos)
    eq(out.attention_mask, mi.attention_mask)
    assert jax.tree.structure(mi) != jax.tree.structure(mi.replace(batch_axis_name="other"))
    shifted = jax.tree.map(lambda x: x + 0, mi)
    eq(shifted.stored_attention_mask, mi.stored_attention_mask)


def test_constructor_accepts_older_field_names(rng):
    m = rng.random((1, 1, 3, 3)) < 0.5
    q = np.zeros((1, 3), np.int32)
    mi = MaskInfo(_attention_mask=m, _q_segment_ids=q, _kv_segment_ids=q)
    eq(mi.stored_attention_mask, m)
    eq(mi.q_segment_ids, q)
    with pytest.raises(TypeError, match="not both"):
        MaskInfo(attention_mask=m, _attention_mask=m)
    # dataclasses.replace works (it passes the stored fields back to the constructor).
    r = dataclasses.replace(mi, causal=True)
    assert r.causal is True
    eq(r.stored_attention_mask, m)
    with pytest.raises(TypeError, match="integer dtype"):
        MaskInfo(q_positions=np.zeros((1, 3), np.float32))


# -- through the ops --------------------------------------------------------------------------

B, H, D = 2, 2, 8


def qkv(rng, sq, sk):
    return tuple(
        jnp.asarray(rng.standard_normal(shape), jnp.float32) for shape in ((B, sq, H, D), (B, sk, H, D), (B, sk, H, D))
    )


def close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5, rtol=2e-5)


@pytest.mark.slow
@pytest.mark.parametrize(("sq", "sk"), [(13, 13), (7, 19)])
def test_flash_attention_with_compat_mask_infos(rng, sq, sk):
    q, k, v = qkv(rng, sq, sk)
    q_seg, kv_seg = random_ids(rng, B, sq, n_seg=2, p_pad=0.1), random_ids(rng, B, sk, n_seg=2, p_pad=0.1)
    seg = np_segment_mask(q_seg, kv_seg)
    cases = [
        (MaskInfo.from_segments(q_seg, kv_seg).apply_causal(), seg & np_causal(sq, sk)),
        (MaskInfo.from_segments(q_seg, kv_seg).apply_causal(np.array([0, 2], np.int32)), None),
        (MaskInfo.from_segments(q_seg, kv_seg).apply_sliding_window((3, 1)), seg & np_window(sq, sk, 3, 1)),
        (MaskInfo.from_segments(q_seg, kv_seg).apply_chunked(4), seg & np_chunked(sq, sk, 4)),
        (MaskInfo.from_random(B, sq, sk, sparsity=0.4, seed=3), None),
        (MaskInfo.from_segments(q_seg >= 0, kv_seg >= 0, is_attn_mask=True), None),
    ]
    for mi, want in cases:
        if want is None:
            want = np.asarray(mi.attention_mask)
        else:
            eq(mi.attention_mask, want)
        out = ejkernel.flash_attention(q, k, v, mask_info=mi, platform="xla")
        close(out, attention_reference(q, k, v, mask_info=MaskInfo.from_attention_mask(want)))


def test_flash_attention_with_a_decode_window(rng):
    sk = 17
    q, k, v = qkv(rng, 1, sk)
    kv_seg = random_ids(rng, B, sk, n_seg=1, p_pad=0.1)
    full = MaskInfo.from_segments(np.zeros((B, sk), np.int32), kv_seg).with_causal()
    mi = full.apply_sliding_window((4, 0), mode="decode", index=np.array([sk - 1, 9], np.int32))
    assert mi.shape == (B, 1, 5)
    starts = [sk - 5, 5]
    k_cut = jnp.stack([k[e, s : s + 5] for e, s in enumerate(starts)])
    v_cut = jnp.stack([v[e, s : s + 5] for e, s in enumerate(starts)])
    out = ejkernel.flash_attention(q, k_cut, v_cut, mask_info=mi, platform="xla")
    want = np.stack(
        [
            (np_segment_mask(np.zeros((1, sk)), kv_seg[e : e + 1])[0, 0, 0] & (np.arange(sk) <= 9 if e else True))[
                s : s + 5
            ]
            for e, s in enumerate(starts)
        ]
    )
    eq(mi.attention_mask[:, 0, 0], want)
    close(out, attention_reference(q, k_cut, v_cut, mask_info=MaskInfo.from_attention_mask(want[:, None, None])))


# -- from_cu_seqlens in earlier releases' form (max_q_len=) ---------------------------------------


def test_from_cu_seqlens_earlier_form_is_a_padding_mask_per_example():
    """Earlier releases: ``[start_0, end_0, start_1, end_1, ...]`` pairs and ``max_q_len``; told
    from the packed form by the keyword, never by the shape."""
    mi = MaskInfo.from_cu_seqlens(jnp.array([0, 5, 2, 6]), max_q_len=8)
    eq(mi.q_segment_ids, [[0, 0, 0, 0, 0, -1, -1, -1], [-1, -1, 0, 0, 0, 0, -1, -1]])
    eq(mi.kv_segment_ids, mi.q_segment_ids)
    cross = MaskInfo.from_cu_seqlens(
        jnp.array([0, 3, 0, 2]), max_q_len=4, cu_seqlens_kv=jnp.array([0, 4, 1, 3]), max_kv_len=5,
        q_positions=jnp.zeros((2, 4), jnp.int32), sequence_axis_name="seq",
    )  # fmt: skip
    eq(cross.q_segment_ids, [[0, 0, 0, -1], [0, 0, -1, -1]])
    eq(cross.kv_segment_ids, [[0, 0, 0, 0, -1], [-1, 0, 0, -1, -1]])
    assert cross.sequence_axis_name == "seq" and cross.q_positions.shape == (2, 4)
    # The same three numbers in the packed form: two sequences in one row.
    eq(MaskInfo.from_cu_seqlens(jnp.array([0, 3, 7])).q_segment_ids, [[0, 0, 0, 1, 1, 1, 1]])
    q = jax.random.normal(jax.random.key(0), (2, 8, 2, 16))
    out = ejkernel.flash_attention(q, q, q, mask_info=mi)
    pad = np.zeros((2, 8), bool)
    pad[0, :5] = pad[1, 2:6] = True
    ref = attention_reference(q, q, q, mask_info=MaskInfo.from_attention_mask(jnp.asarray(pad)))
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-5, rtol=1e-5)


def test_from_cu_seqlens_forms_do_not_mix():
    with pytest.raises(ValueError, match=r"holds \[start, end\) pairs.*length 2 x batch.*got shape \(3,\)"):
        MaskInfo.from_cu_seqlens(jnp.array([0, 3, 7]), max_q_len=8)
    with pytest.raises(TypeError, match="max_q_len= takes the earlier form"):
        MaskInfo.from_cu_seqlens(jnp.array([0, 3]), seq_len_q=4, max_q_len=4)
    with pytest.raises(TypeError, match="cu_seqlens_kv= and max_kv_len= belong to the earlier form"):
        MaskInfo.from_cu_seqlens(jnp.array([0, 3]), cu_seqlens_kv=jnp.array([0, 3]))
    with pytest.raises(ValueError, match="a pair per example each, got 2 and 1"):
        MaskInfo.from_cu_seqlens(jnp.array([0, 3, 0, 2]), max_q_len=4, cu_seqlens_kv=jnp.array([0, 3]))
