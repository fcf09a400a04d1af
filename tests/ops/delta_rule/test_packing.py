"""``families.packing.take_rows``: the varlen layout's gather, whose gradient is a gather too."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ejkernel.ops.families.delta_rule import varlen_plan
from ejkernel.ops.families.packing import take_rows


def _plain(x, index):
    y = x[jnp.maximum(index, 0)]
    return jnp.where((index >= 0).reshape((-1,) + (1,) * (y.ndim - 1)), y, 0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("direction", ["to_chunks", "from_chunks"])
def test_take_rows_matches_the_gather_and_its_scatter_gradient(direction, dtype):
    """Sequences of 0, 1, 7, 16 and 30 tokens (an empty one, a single token, a partial and a
    whole chunk) into 8-token chunks and back: the values and the VJP of a random cotangent equal
    the plain gather's (whose transpose JAX makes a scatter-add), and the gradient program holds
    no scatter."""
    lens = np.asarray([7, 0, 1, 16, 30])
    cu = jnp.asarray(np.concatenate([[0], np.cumsum(lens)]), jnp.int32)
    total, chunk = int(lens.sum()), 8
    plan = varlen_plan(cu, total, chunk)
    src, dst = plan["src"], plan["dst"]
    index, inverse = (src, dst) if direction == "to_chunks" else (dst, src)
    rows = total if direction == "to_chunks" else int(src.shape[0])
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((rows, 3, 5)), dtype)
    out, vjp = jax.vjp(lambda x: take_rows(x, index, inverse), x)
    ref, vjp_ref = jax.vjp(lambda x: _plain(x, index), x)
    np.testing.assert_array_equal(np.asarray(out, np.float32), np.asarray(ref, np.float32))
    cot = jnp.asarray(rng.standard_normal(out.shape), dtype)
    (dx,), (dx_ref,) = vjp(cot), vjp_ref(cot)
    assert float(jnp.abs(dx_ref.astype(jnp.float32)).max()) > 0
    np.testing.assert_array_equal(np.asarray(dx, np.float32), np.asarray(dx_ref, np.float32))
    grad_program = str(jax.make_jaxpr(lambda x, c: jax.vjp(lambda x: take_rows(x, index, inverse), x)[1](c))(x, cot))
    assert "scatter" not in grad_program
    assert "scatter" in str(jax.make_jaxpr(lambda x, c: jax.vjp(lambda x: _plain(x, index), x)[1](c))(x, cot))


def test_gather_rows_keeps_forward_mode_and_tokens_outside_the_sequences_get_nothing():
    """The plain gather (the XLA paths' layout) differentiates forward too (``take_rows``, a
    custom VJP, does not: the Triton path only); under jit ``cu_seqlens`` may end before the packed
    length, and the tokens past it get no slot (``dst = -1``): zeros out, zero gradient."""
    from ejkernel.ops.families.packing import gather_rows

    cu = jnp.asarray([0, 5, 5, 12], jnp.int32)
    total, chunk = 15, 4
    plan = varlen_plan(cu, total, chunk)
    dst = np.asarray(plan["dst"])
    assert (dst[12:] == -1).all() and (dst[:12] >= 0).all() and len(set(dst[:12])) == 12
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((total, 3)), jnp.float32)
    tx = jnp.asarray(rng.standard_normal((total, 3)), jnp.float32)
    _, ty = jax.jvp(lambda x: gather_rows(x, plan["src"]), (x,), (tx,))
    np.testing.assert_array_equal(np.asarray(ty), np.asarray(gather_rows(tx, plan["src"])))
    with pytest.raises(TypeError, match="custom_vjp"):
        jax.jvp(lambda x: take_rows(x, plan["src"], plan["dst"]), (x,), (tx,))
    # out of the chunks and back: tokens 12..14 come back as zeros, and get no gradient
    back, vjp = jax.vjp(lambda x: take_rows(take_rows(x, plan["src"], plan["dst"]), plan["dst"], plan["src"]), x)
    np.testing.assert_array_equal(np.asarray(back[:12]), np.asarray(x[:12]))
    assert not np.asarray(back[12:]).any()
    (dx,) = vjp(jnp.ones_like(back))
    np.testing.assert_array_equal(np.asarray(dx), np.r_[np.ones((12, 3)), np.zeros((3, 3))])
