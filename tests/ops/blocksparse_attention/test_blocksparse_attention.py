"""``blocksparse_attention`` beyond the shared conformance suite: the block metadata against the
dense mask it describes (no visible pair lost, no empty tile visited, fine masks only where a
tile is partial), eager calls, bad input, the refused options, memory linear in the length."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.errors import UnsupportedError
from ejkernel.ops.blocksparse_attention import (
    block_layout,
    block_mask,
    causal_mask,
    chunked_mask,
    compile_static,
    full_mask,
    local_mask,
    token_mask,
)
from ejkernel.ops.blocksparse_attention.cases import CASES
from ejkernel.ops.blocksparse_attention.mask import (
    EMPTY,
    FLAG_ATTENTION_MASK,
    FLAG_SEGMENTS,
    FLAG_STATIC,
    FULL,
)
from ejkernel.testing import conformance as C
from ejkernel.types import MaskInfo

OP = "blocksparse_attention"


def _masks(sq: int, sk: int, rng: np.random.Generator) -> dict[str, object]:
    bm = rng.random((-(-sq // 7), -(-sk // 11))) < 0.4
    tm = rng.random((sq, sk)) < 0.05
    tm[:, :3] = True
    return {
        "full": full_mask(),
        "causal": causal_mask(),
        "causal-window": causal_mask() & local_mask((13, 0)),
        "window-sym": local_mask(9),
        "chunked": causal_mask() & chunked_mask(20),
        "block": block_mask(bm, (7, 11)),
        "token": token_mask(tm),
        "all": causal_mask() & local_mask((30, 4)) & chunked_mask(25) & block_mask(bm, (7, 11)),
    }


def _dense_of_layout(layout, sq, sk, seg=None, pair=None):
    """The token mask ``[Bm, sq, sk]`` the kernels compute from ``layout`` (visited tiles, each with
    the fine masks its flags ask for), and the tiles' flags checked against the truth."""
    bq, bk = layout.block_q, layout.block_k
    bm_, nq, _ = layout.kv_index.shape
    nk = -(-sk // bk)
    idx, cnt = np.asarray(layout.kv_index), np.asarray(layout.kv_count)
    fl, mi = np.asarray(layout.kv_flags), np.asarray(layout.kv_mask_index)
    pm = np.asarray(layout.partial_masks)
    out = np.zeros((bm_, nq * bq, nk * bk), bool)
    visits = 0
    for b, i in itertools.product(range(bm_), range(nq)):
        seen = set()
        for t in range(cnt[b, i]):
            j = int(idx[b, i, t])
            assert j not in seen
            seen.add(j)
            visits += 1
            tile = np.ones((bq, bk), bool)
            if fl[b, i, t] & FLAG_STATIC:
                tile &= pm[mi[b, i, t]]
            rows, cols = slice(i * bq, (i + 1) * bq), slice(j * bk, (j + 1) * bk)
            if seg is not None and fl[b, i, t] & FLAG_SEGMENTS:
                qs = np.pad(seg[0][b], (0, nq * bq - sq), constant_values=-1)[rows]
                ks = np.pad(seg[1][b], (0, nk * bk - sk), constant_values=-1)[cols]
                tile &= (qs[:, None] == ks[None, :]) & (qs[:, None] >= 0)
            if pair is not None and fl[b, i, t] & FLAG_ATTENTION_MASK:
                p = np.pad(pair[min(b, pair.shape[0] - 1)].any(0), ((0, nq * bq - sq), (0, nk * bk - sk)))
                tile &= p[rows, cols]
            out[b, rows, cols] = tile
    return out[:, :sq, :sk], visits


@pytest.mark.parametrize("tiles", [(16, 16), (8, 32), (32, 8), (128, 128)])
@pytest.mark.parametrize("lengths", [(61, 61), (37, 90), (90, 37)])
def test_static_metadata_is_the_mask(tiles, lengths):
    sq, sk = lengths
    for name, m in _masks(sq, sk, np.random.default_rng(sq * 1000 + sk)).items():
        truth = m.dense(sq, sk)
        static = compile_static(m, sq, sk, *tiles)
        layout = block_layout(static)
        got, visits = _dense_of_layout(layout, sq, sk)
        np.testing.assert_array_equal(got[0], truth, err_msg=name)
        # Exactly the tiles that hold a visible pair are visited, and full tiles carry no mask.
        bq, bk = tiles
        nq, nk = static.state.shape
        pad = np.zeros((nq * bq, nk * bk), bool)
        pad[:sq, :sk] = truth
        nonempty = pad.reshape(nq, bq, nk, bk).any(axis=(1, 3))
        assert visits == int(nonempty.sum()), name
        np.testing.assert_array_equal(static.state != EMPTY, nonempty, err_msg=name)
        rows_valid = (np.arange(nq * bq) < sq).reshape(nq, bq)[:, :, None, None]
        cols_whole = (np.arange(nk) * bk + bk <= sk)[None, :]  # key padding is masked
        full = (pad.reshape(nq, bq, nk, bk) | ~rows_valid).all(axis=(1, 3)) & cols_whole
        np.testing.assert_array_equal(static.state == FULL, full, err_msg=name)


def test_static_metadata_dedups_partial_patterns_and_is_cached():
    m = causal_mask() & local_mask((64, 0))
    st = compile_static(m, 4096, 4096, 64, 64)
    assert st.partial_masks.shape[0] == 2  # the diagonal and the window's far edge
    assert compile_static(causal_mask() & local_mask((64, 0)), 4096, 4096, 64, 64) is st
    assert st.max_kv_blocks == 2 and st.density < 0.04


def test_runtime_metadata_documents_and_pairwise():
    rng = np.random.default_rng(3)
    b, sq, sk = 3, 70, 70
    seg = np.zeros((b, sq), np.int32)
    for r in range(b):
        for c in np.sort(rng.choice(np.arange(1, sq), 3, replace=False)):
            seg[r, c:] += 1
    seg[1, -9:] = -1
    seg[2, 10:14] = 9  # ids no key of the other side has... the same on both sides here
    pair = rng.random((b, 2, sq, sk)) < 0.8
    m = causal_mask() & local_mask((25, 0))
    for tiles in [(16, 16), (8, 24)]:
        static = compile_static(m, sq, sk, *tiles)
        layout = block_layout(static, jnp.asarray(seg), jnp.asarray(seg), jnp.asarray(pair))
        got, _ = _dense_of_layout(layout, sq, sk, (seg, seg), pair)
        truth = m.dense(sq, sk)[None] & (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] >= 0)
        truth = truth & pair.any(1)
        np.testing.assert_array_equal(got, truth)


@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("documents", "everything", "pairwise")], ids=str)
def test_eager_forward_and_grad(case):
    C.check(lambda **kw: ejkernel.blocksparse_attention(**kw, platform="xla"), case, op=OP, modes=("eager",))


def test_mask_builder_forms_agree():
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.standard_normal((1, 2, 48, 16)), jnp.float32)
    k = v = jnp.asarray(rng.standard_normal((1, 1, 48, 16)), jnp.float32)
    m = causal_mask() & local_mask((10, 0))
    a = ejkernel.blocksparse_attention(q, k, v, causal=False, mask_builder=lambda: m)
    b = ejkernel.blocksparse_attention(q, k, v, causal=False, mask_builder=lambda *shape: m.dense(48, 48))
    c = ejkernel.blocksparse_attention(q, k, v, sliding_window=(10, 0))
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
    np.testing.assert_allclose(np.asarray(a), np.asarray(c), atol=1e-6)
    # A different mask gives a different result (the builder is not ignored).
    d = ejkernel.blocksparse_attention(q, k, v, causal=False, mask_builder=lambda: local_mask((3, 0)))
    assert float(jnp.max(jnp.abs(a - d))) > 1e-2


def _qkv(b=1, h=2, hk=1, s=32, d=16):
    rng = np.random.default_rng(1)
    return (
        jnp.asarray(rng.standard_normal((b, h, s, d)), jnp.float32),
        jnp.asarray(rng.standard_normal((b, hk, s, d)), jnp.float32),
        jnp.asarray(rng.standard_normal((b, hk, s, d)), jnp.float32),
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"sequence_parallelism_mesh_axis_name": "sp"}, ValueError, "sequence_parallelism_mesh_axis_name"),
        ({"qkv_layouts": ("x",)}, ValueError, "qkv_layouts"),
        ({"fused_backward": True}, ValueError, "fused_backward"),
        ({"purify": True}, ValueError, "purify"),
        ({"fused_backward": 1}, TypeError, "fused_backward"),
        ({"chunk_size": 0}, ValueError, "chunk_size"),
        ({"sliding_window": -1}, ValueError, "sliding_window"),
        ({"mask_builder": 3}, TypeError, "mask_builder"),
        ({"mask_builder": lambda: "nope"}, TypeError, "mask_builder"),
        ({"mask_builder": lambda: np.ones((2, 32, 32), bool)}, ValueError, "per-head"),
        ({"mask_builder": lambda: np.ones((31, 32), bool)}, ValueError, "mask_builder"),
        ({"mask_builder": lambda: block_mask(np.ones((3, 3), bool), 16)}, ValueError, "block mask"),
        ({"attention_mask": jnp.ones((1, 3, 32, 32), bool)}, ValueError, "attention_mask"),
        ({"attention_mask": jnp.ones((32, 32), bool)}, ValueError, "attention_mask"),
        ({"attention_mask": jnp.ones((1, 1, 32, 32), jnp.float32)}, TypeError, "attention_mask"),
        ({"mask_info": MaskInfo.from_segments(np.zeros((1, 31), np.int32))}, ValueError, "q_segment_ids"),
        ({"mask_info": "segments"}, TypeError, "mask_info"),
        ({"softmax_aux": jnp.ones((3, 2, 1))}, ValueError, "softmax_aux"),
    ],
)
def test_bad_options(kwargs, error, words):
    q, k, v = _qkv()
    aux = kwargs.pop("softmax_aux", None)
    with pytest.raises(error, match=words):
        ejkernel.blocksparse_attention(q, k, v, aux, **kwargs)


@pytest.mark.parametrize(
    ("shapes", "words"),
    [
        (((1, 2, 32, 16), (1, 2, 32, 16), (1, 2, 31, 16)), "seq_k"),
        (((1, 3, 32, 16), (1, 2, 32, 16), (1, 2, 32, 16)), "num_heads"),
        (((1, 32, 16), (1, 2, 32, 16), (1, 2, 32, 16)), "query"),
        (((1, 2, 32, 16), (1, 2, 32, 8), (1, 2, 32, 16)), "head_dim"),
        (((2, 2, 32, 16), (1, 2, 32, 16), (1, 2, 32, 16)), "batch"),
    ],
)
def test_bad_shapes(shapes, words):
    q, k, v = (jnp.zeros(s, jnp.float32) for s in shapes)
    with pytest.raises(ValueError, match=words):
        ejkernel.blocksparse_attention(q, k, v)


def test_bias_is_declined_with_the_reason():
    q, k, v = _qkv()
    with pytest.raises(UnsupportedError, match="flash_attention"):
        ejkernel.blocksparse_attention(q, k, v, None, jnp.zeros((1, 2, 32, 32)), platform="xla")


def test_fully_masked_rows_are_zero_without_nan():
    q, k, v = _qkv(s=40)
    seg = np.zeros((1, 40), np.int32)
    seg[0, 5:9] = 3  # queries of a document no key has
    kv_seg = np.where(seg == 3, 0, seg)
    mi = MaskInfo.from_segments(seg, kv_seg)

    def loss(q, k, v):
        return jnp.sum(ejkernel.blocksparse_attention(q, k, v, mask_info=mi, cfg=_small()) ** 2)

    out = ejkernel.blocksparse_attention(q, k, v, mask_info=mi, cfg=_small())
    assert bool(jnp.all(out[:, :, 5:9] == 0)) and bool(jnp.all(jnp.isfinite(out)))
    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in grads)
    assert bool(jnp.all(grads[0][:, :, 5:9] == 0))


def _small():
    from ejkernel.ops import BwdParams, FwdParams
    from ejkernel.ops.blocksparse_attention import BlockSparseAttentionConfig

    return BlockSparseAttentionConfig(
        fwd_params=FwdParams(q_blocksize=16, kv_blocksize=16),
        bwd_params=BwdParams(q_blocksize=16, kv_blocksize=16),
        platform="xla",
    )


def _temp_bytes(seq: int) -> int:
    spec = jax.ShapeDtypeStruct((1, 2, seq, 64), jnp.float32)

    def loss(q, k, v):
        return jnp.sum(ejkernel.blocksparse_attention(q, k, v, sliding_window=(128, 0), platform="xla"))

    compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(spec, spec, spec).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


@pytest.mark.slow
def test_memory_is_linear_in_the_length():
    short, long = _temp_bytes(1024), _temp_bytes(4096)
    assert long / short <= 4 * 1.25, (short, long)
    assert long < 2 * 4096 * 4096 * 4 / 8  # far below the [heads, seq, seq] float32 logits
