"""``native_sparse_attention`` beyond the shared conformance cases: bad input, the forms that
must agree (packed sequences and one call per sequence, the config's block_size and the call's,
the kernel-level form), eager calls, and memory that grows linearly with the sequence."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.ops.native_sparse_attention import NativeSparseAttentionConfig, apply_native_sparse_attention
from ejkernel.ops.native_sparse_attention.cases import NSACase
from ejkernel.testing import conformance as C

OP = "native_sparse_attention"


def _arrays(b=1, s=40, h=4, hk=2, d=16, seed=0):
    rng = np.random.default_rng(seed)
    q = jnp.asarray(rng.standard_normal((b, s, h, d)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((b, s, hk, d)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((b, s, hk, d)), jnp.float32)
    g = jnp.asarray(rng.random((b, s, h)), jnp.float32)
    return q, k, v, g


def test_bad_input():
    q, k, v, g = _arrays()
    idx = jnp.zeros((1, 40, 2, 3), jnp.int32)
    with pytest.raises(ValueError, match=r"pass g_cmp .* or block_indices"):
        ejkernel.native_sparse_attention(q, k, v)
    with pytest.raises(ValueError, match="needs both window_size and its gate g_swa"):
        ejkernel.native_sparse_attention(q, k, v, g, g, window_size=8)
    with pytest.raises(ValueError, match="needs both window_size and its gate g_swa"):
        ejkernel.native_sparse_attention(q, k, v, g, g, g_swa=g)
    with pytest.raises(ValueError, match="block_indices must be 4-D"):
        ejkernel.native_sparse_attention(q, k, v, block_indices=idx[..., 0])
    with pytest.raises(TypeError, match="block_indices must have an integer dtype"):
        ejkernel.native_sparse_attention(q, k, v, block_indices=idx.astype(jnp.float32))
    with pytest.raises(ValueError, match="g_cmp must have num_heads = 4"):
        ejkernel.native_sparse_attention(q, k, v, g[..., :2], g)
    with pytest.raises(ValueError, match="block_counts must have num_kv_heads = 2"):
        ejkernel.native_sparse_attention(q, k, v, block_indices=idx, block_counts=jnp.ones((1, 40, 3), jnp.int32))
    with pytest.raises(ValueError, match=r"num_heads .4. must be a multiple of num_kv_heads .3."):
        ejkernel.native_sparse_attention(q, jnp.ones((1, 40, 3, 16)), jnp.ones((1, 40, 3, 16)), g, g)
    with pytest.raises(ValueError, match="query must have batch 1"):
        q2, k2, v2, g2 = _arrays(b=2)
        ejkernel.native_sparse_attention(q2, k2, v2, g2, g2, cu_seqlens=jnp.asarray([0, 40], jnp.int32))
    with pytest.raises(ValueError, match="cu_seqlens must start at 0, never decrease"):
        ejkernel.native_sparse_attention(q, k, v, g, g, cu_seqlens=jnp.asarray([0, 30, 20], jnp.int32))
    with pytest.raises(ValueError, match=r"block_size=8 contradicts cfg\.block_size=16"):
        ejkernel.native_sparse_attention(q, k, v, g, g, block_size=8, cfg=NativeSparseAttentionConfig(block_size=16))
    with pytest.raises(ValueError, match="block_counts must be >= 0"):
        ejkernel.native_sparse_attention(q, k, v, g, g, block_counts=-1)


def test_packed_equals_one_call_per_sequence():
    """cu_seqlens: each sequence's blocks start at its first token, as if it were alone."""
    q, k, v, g = _arrays(s=45)
    cu = jnp.asarray([0, 17, 17, 45], jnp.int32)
    kw = dict(block_counts=2, block_size=4, window_size=5)
    packed = ejkernel.native_sparse_attention(q, k, v, g, g, cu_seqlens=cu, g_swa=g, **kw)
    for lo, hi in ((0, 17), (17, 45)):
        alone = ejkernel.native_sparse_attention(*(x[:, lo:hi] for x in (q, k, v, g, g)), g_swa=g[:, lo:hi], **kw)
        np.testing.assert_allclose(np.asarray(packed[:, lo:hi]), np.asarray(alone), rtol=2e-5, atol=2e-6)


def test_forms_agree():
    q, k, v, g = _arrays()
    idx = jnp.asarray(np.random.default_rng(1).integers(0, 5, (1, 40, 2, 3)), jnp.int32)
    by_call = ejkernel.native_sparse_attention(q, k, v, g, g, block_counts=2, block_size=8)
    by_cfg = ejkernel.native_sparse_attention(
        q, k, v, g, g, block_counts=2, cfg=NativeSparseAttentionConfig(block_size=8)
    )
    np.testing.assert_array_equal(np.asarray(by_call), np.asarray(by_cfg))
    explicit = ejkernel.native_sparse_attention(q, k, v, block_indices=idx, block_counts=3, block_size=8)
    kernel_form = apply_native_sparse_attention(q, k, v, idx, 3, 8)
    np.testing.assert_array_equal(np.asarray(explicit), np.asarray(kernel_form))
    with pytest.warns(UserWarning, match="block_indices is ignored when g_cmp is given"):
        ignored = ejkernel.native_sparse_attention(q, k, v, g, g, idx, 2, block_size=8)
    np.testing.assert_array_equal(np.asarray(ignored), np.asarray(by_call))


def test_eager_forward_and_grad():
    case = NSACase("eager", b=1, s=24, h=2, hk=1, d=8, bs=4, count=2, window=3)
    C.check(lambda **kw: ejkernel.native_sparse_attention(**kw, platform="xla"), case, op=OP, modes=("eager",))


def test_memory_grows_linearly():
    """No [seq, seq] array: 4x the tokens takes at most ~4x the temporary memory (a quadratic
    buffer would take 16x), forward and backward."""

    def temp(s):
        q, k, v, g = _arrays(s=s, h=2, hk=1, d=16)
        cfg = NativeSparseAttentionConfig(block_q=64)

        def loss(q, k, v):
            return jnp.sum(ejkernel.native_sparse_attention(q, k, v, g, g, block_counts=2, block_size=16, cfg=cfg))

        compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(q, k, v).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    small, large = temp(1024), temp(4096)
    assert large <= 6 * small, (small, large)


def test_sharded_over_heads():
    """Query heads and kv heads split together over a mesh axis: each shard is an NSA of its own
    kv groups; the sequence cannot be split."""
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:2]), ("h",))
    q, k, v, g = _arrays()
    heads = P(None, None, "h")
    kw = dict(block_counts=2, block_size=8, window_size=6)
    out = ejkernel.native_sparse_attention(q, k, v, g, g, g_swa=g, mesh=mesh, in_specs=(heads,) * 5, **kw)
    want = ejkernel.native_sparse_attention(q, k, v, g, g, g_swa=g, **kw)
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="cannot be sharded"):
        ejkernel.native_sparse_attention(q, k, v, g, g, g_swa=g, mesh=mesh, in_specs=(P(None, "h"),) * 3, **kw)
