"""``grouped_matmul`` under ``shard_map``: expert parallelism over 8 (simulated) devices.

``examples/moe_expert_parallel.py`` routes tokens to the devices holding their experts with
``all_to_all`` (and, the other way, gives every device all tokens with ``group_offset``); both
must equal the per-token product ``x[t] @ w[expert[t]]`` computed on one device, values and
gradients. The op's own ``mesh=`` path shards the columns of ``rhs`` and refuses the rest.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import ejkernel

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.skipif(len(jax.devices()) < 8, reason="needs 8 (simulated) devices; see tests/conftest.py"),
]

_spec = importlib.util.spec_from_file_location(
    "moe_expert_parallel", Path(__file__).parents[3] / "examples" / "moe_expert_parallel.py"
)
EP = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(EP)

ATOL = 1e-4


@pytest.fixture(scope="module")
def mesh():
    return Mesh(np.array(jax.devices()[:8]), ("ep",))


def _inputs(seed: int, tokens: int = 8 * 24, hidden: int = 40, ffn: int = 24, experts: int = 16, skew: bool = False):
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.standard_normal((tokens, hidden)), jnp.float32)
    if skew:  # every token of the first half to expert 3: one device receives far more rows
        ids = rng.integers(0, experts, tokens)
        ids[: tokens // 2] = 3
    else:
        ids = rng.integers(0, experts, tokens)
    w = jnp.asarray(rng.standard_normal((experts, hidden, ffn)) / np.sqrt(hidden), jnp.float32)
    return x, jnp.asarray(ids, jnp.int32), w


def _per_token(x, ids, w):
    return jnp.einsum("th,thf->tf", x, w[ids], precision=jax.lax.Precision.HIGHEST)


@pytest.mark.parametrize("skew", [False, True])
@pytest.mark.parametrize("route", ["moe_all_to_all", "moe_group_offset"])
def test_expert_parallel_matches_one_device(mesh, route, skew):
    x, ids, w = _inputs(0, skew=skew)
    f = jax.jit(getattr(EP, route), static_argnums=(3,))
    y = f(x, ids, w, mesh)
    np.testing.assert_allclose(np.asarray(y), np.asarray(_per_token(x, ids, w)), atol=ATOL, rtol=ATOL)
    np.testing.assert_allclose(np.asarray(y), np.asarray(EP.moe_reference(x, ids, w)), atol=ATOL, rtol=ATOL)


def test_expert_parallel_gradients(mesh):
    x, ids, w = _inputs(1)
    cot = jnp.asarray(np.random.default_rng(2).standard_normal((x.shape[0], w.shape[2])), jnp.float32)

    def loss(f):
        return lambda x, w: jnp.sum(f(x, w) * cot)

    sharded = jax.jit(jax.grad(loss(lambda x, w: EP.moe_all_to_all(x, ids, w, mesh)), argnums=(0, 1)))(x, w)
    single = jax.grad(loss(lambda x, w: _per_token(x, ids, w)), argnums=(0, 1))(x, w)
    for got, want in zip(sharded, single, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=ATOL, rtol=ATOL)


def test_mesh_shards_the_columns(mesh):
    """``mesh=``: columns of rhs over "ep" (no communication) give the unsharded result."""
    rng = np.random.default_rng(3)
    lhs = jnp.asarray(rng.standard_normal((50, 32)), jnp.float32)
    rhs = jnp.asarray(rng.standard_normal((3, 32, 64)), jnp.float32)
    sizes = jnp.asarray([20, 0, 25], jnp.int32)
    want = ejkernel.grouped_matmul(lhs, rhs, sizes)
    got = ejkernel.grouped_matmul(lhs, rhs, sizes, mesh=mesh, in_specs=(P(), P(None, None, "ep"), P()))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)
    got_t = ejkernel.grouped_matmul(
        lhs, jnp.swapaxes(rhs, 1, 2), sizes, transpose_rhs=True, mesh=mesh, in_specs=(P(), P(None, "ep"), P())
    )
    np.testing.assert_allclose(np.asarray(got_t), np.asarray(want), atol=1e-5)
    # rhs_scale [groups, num_blocks, 1, n] follows the columns it scales.
    scale = jnp.asarray(rng.uniform(0.5, 2.0, (3, 2, 1, 64)), jnp.float32)
    want_s = ejkernel.grouped_matmul(lhs, rhs, sizes, rhs_scale=scale)
    got_s = ejkernel.grouped_matmul(
        lhs, rhs, sizes, rhs_scale=scale, mesh=mesh, in_specs=(P(), P(None, None, "ep"), P())
    )
    np.testing.assert_allclose(np.asarray(got_s), np.asarray(want_s), atol=1e-5)
    dense = lhs @ (rhs[2] * jnp.repeat(scale[2, :, 0], 16, axis=0))  # group 2: rows 20..44, two blocks of 16
    np.testing.assert_allclose(np.asarray(got_s[20:45]), np.asarray(dense[20:45]), atol=1e-4)


@pytest.mark.parametrize(
    "specs,match",
    [
        ((P("ep"), P(), P()), "the m axis of lhs cannot be sharded"),
        ((P(), P("ep"), P()), "all_to_all"),
        ((P(None, "ep"), P(None, "ep"), P()), "the k axis of lhs cannot be sharded"),
    ],
)
def test_mesh_refuses_rows_experts_and_contraction(mesh, specs, match):
    lhs = jnp.ones((16, 16), jnp.float32)
    rhs = jnp.ones((8, 16, 16), jnp.float32)
    with pytest.raises(ValueError, match=match):
        ejkernel.grouped_matmul(lhs, rhs, jnp.full((8,), 2, jnp.int32), mesh=mesh, in_specs=specs)
