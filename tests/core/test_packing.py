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
