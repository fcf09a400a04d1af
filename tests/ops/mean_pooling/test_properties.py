"""``mean_pooling`` beyond the shared conformance cases: the forms agree with each other, the
chunk_size hint, empty sequences under grad, sharding over the hidden axis, and bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import ejkernel
from ejkernel.ops import record_dispatches


def _x(*shape, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.float32)


def test_forms_agree():
    x = _x(3, 7, 10)
    mask = jnp.asarray(np.random.default_rng(1).random((3, 7)) < 0.6)
    by_keyword = ejkernel.mean_pooling(x, attention_mask=mask)
    positional = ejkernel.mean_pooling(x, mask)  # the earlier releases' form
    int_mask = ejkernel.mean_pooling(x, attention_mask=mask.astype(jnp.int32))
    np.testing.assert_array_equal(np.asarray(by_keyword), np.asarray(positional))
    np.testing.assert_array_equal(np.asarray(by_keyword), np.asarray(int_mask))
    # dense == packed with uniform lengths == a loop of one-sequence calls
    dense = ejkernel.mean_pooling(x)
    packed = ejkernel.mean_pooling(x.reshape(21, 10), jnp.arange(4, dtype=jnp.int32) * 7)
    loop = jnp.stack([ejkernel.mean_pooling(x[i]) for i in range(3)])
    np.testing.assert_allclose(np.asarray(dense), np.asarray(packed), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(dense), np.asarray(loop), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(dense), np.asarray(x.mean(1)), rtol=1e-5, atol=1e-6)


def test_empty_sequences_pool_to_zeros_with_zero_gradients():
    x = _x(9, 6)
    cu = jnp.asarray([0, 0, 4, 4, 9], jnp.int32)

    def loss(x):
        return jnp.sum(ejkernel.mean_pooling(x, cu) ** 2)

    out = jax.jit(lambda x: ejkernel.mean_pooling(x, cu))(x)
    assert bool(jnp.all(out[0] == 0)) and bool(jnp.all(out[2] == 0))
    g = jax.jit(jax.grad(loss))(x)
    assert bool(jnp.all(jnp.isfinite(g)))
    np.testing.assert_allclose(np.asarray(g[:4]), np.asarray(2 * out[1] / 4)[None].repeat(4, 0), rtol=1e-6)


def test_chunk_size_is_a_config_hint():
    x = _x(2, 8, 4)
    with record_dispatches() as log:
        ejkernel.mean_pooling(x, chunk_size=16)
    assert log[0].config.block_size == 16
    with pytest.raises(ValueError, match="chunk_size must be a power of two"):
        ejkernel.mean_pooling(x, chunk_size=24)


def test_sharded_over_hidden():
    mesh = Mesh(np.array(jax.devices()[:4]), ("h",))
    x = _x(12, 8)
    cu = jnp.asarray([0, 5, 12], jnp.int32)
    out = ejkernel.mean_pooling(x, cu, mesh=mesh, in_specs=(P(None, "h"),))
    np.testing.assert_allclose(np.asarray(out), np.asarray(ejkernel.mean_pooling(x, cu)), rtol=1e-6)
    with pytest.raises(ValueError, match="cannot be sharded"):
        ejkernel.mean_pooling(x.reshape(2, 6, 8), mesh=mesh, in_specs=(P("h", None, None),))


def test_bad_input():
    x = _x(2, 5, 4)
    with pytest.raises(ValueError, match="cu_seqlens needs packed x"):
        ejkernel.mean_pooling(x, jnp.asarray([0, 3, 10], jnp.int32))
    with pytest.raises(TypeError, match="attention_mask must be bool or int"):
        ejkernel.mean_pooling(x, attention_mask=jnp.ones((2, 5), jnp.float32))
    with pytest.raises(ValueError, match="attention_mask must have x's shape"):
        ejkernel.mean_pooling(x, attention_mask=jnp.ones((2, 4), bool))
    with pytest.raises(ValueError, match="cu_seqlens must start at 0, never decrease"):
        ejkernel.mean_pooling(x.reshape(10, 4), jnp.asarray([0, 6, 3], jnp.int32))
    with pytest.raises(ValueError, match="a token mask and attention_mask is passed too"):
        ejkernel.mean_pooling(x, jnp.ones((2, 5), bool), attention_mask=jnp.ones((2, 5), bool))
