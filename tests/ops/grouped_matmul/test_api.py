"""``grouped_matmul``'s public contract beyond the conformance cases: bad input is a clear error
before anything runs, traced group sizes are checked under ``ejkernel.checks()``, the earlier
releases' options are accepted (or refused with what to use), and the XLA path equals
``jax.lax.ragged_dot`` (transposed rhs, expert slices, jit, grad)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.ops import record_dispatches
from ejkernel.ops.grouped_matmul import GroupedMatmulConfig

HIGHEST = jax.lax.Precision.HIGHEST


@pytest.fixture
def arrays(rng):
    lhs = jnp.asarray(rng.standard_normal((30, 16)), jnp.float32)
    rhs = jnp.asarray(rng.standard_normal((4, 16, 12)), jnp.float32)
    sizes = jnp.asarray([7, 0, 13, 6], jnp.int32)  # 26 of 30 rows
    return lhs, rhs, sizes


def test_matches_ragged_dot_with_zero_rows_past_the_groups(arrays):
    lhs, rhs, sizes = arrays
    out = ejkernel.grouped_matmul(lhs, rhs, sizes, precision=HIGHEST)
    want = jax.lax.ragged_dot(lhs, rhs, sizes, precision=HIGHEST)
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), atol=1e-5)
    assert out.dtype == jnp.float32 and bool((out[26:] == 0).all())


def test_transposed_rhs_and_low_precision_output(arrays):
    lhs, rhs, sizes = arrays
    a = ejkernel.grouped_matmul(lhs, rhs, sizes, precision=HIGHEST)
    b = ejkernel.grouped_matmul(lhs, jnp.swapaxes(rhs, 1, 2), sizes, transpose_rhs=True, precision=HIGHEST)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
    c = ejkernel.grouped_matmul(lhs.astype(jnp.bfloat16), rhs.astype(jnp.bfloat16), sizes, preferred_element_type=None)
    assert c.dtype == jnp.bfloat16


def test_expert_slices_sum_to_the_whole(arrays):
    """Two shards of 2 experts each (group_offset 0 and 2): their outputs add up to the full call,
    and existing_out keeps the rows of the other shard."""
    lhs, rhs, sizes = arrays
    full = ejkernel.grouped_matmul(lhs, rhs, sizes, precision=HIGHEST)
    parts = [ejkernel.grouped_matmul(lhs, rhs[o : o + 2], sizes, o, precision=HIGHEST) for o in (0, 2)]
    np.testing.assert_allclose(np.asarray(parts[0] + parts[1]), np.asarray(full), atol=1e-5)
    chained = ejkernel.grouped_matmul(lhs, rhs[2:], sizes, jnp.int32(2), parts[0], precision=HIGHEST)
    np.testing.assert_allclose(np.asarray(chained), np.asarray(full), atol=1e-5)


def test_jit_grad_and_traced_offset(arrays):
    lhs, rhs, sizes = arrays

    def loss(lhs, rhs, offset):
        return jnp.sum(ejkernel.grouped_matmul(lhs, rhs, sizes, offset, precision=HIGHEST) ** 2)

    def ref_loss(lhs, rhs, offset):
        del offset
        padded = jnp.concatenate([jnp.zeros_like(rhs[:1]), rhs, jnp.zeros_like(rhs[:1])])
        s = jnp.asarray([0, 7, 0, 13, 6], jnp.int32)
        return jnp.sum(jax.lax.ragged_dot(lhs, padded[:5], s, precision=HIGHEST) ** 2)

    g = jax.jit(jax.grad(loss, argnums=(0, 1)))(lhs, rhs, jnp.int32(0))
    want = jax.grad(ref_loss, argnums=(0, 1))(lhs, rhs, 0)
    for x, y in zip(g, want, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-4)


def test_rhs_bias_is_added_to_its_groups_rows(arrays):
    lhs, rhs, sizes = arrays
    bias = jnp.arange(4 * 12, dtype=jnp.float32).reshape(4, 12)
    out = ejkernel.grouped_matmul(lhs, rhs, sizes, rhs_bias=bias, precision=HIGHEST)
    base = ejkernel.grouped_matmul(lhs, rhs, sizes, precision=HIGHEST)
    row_group = np.repeat(np.arange(4), np.asarray(sizes))
    expect = np.asarray(base).copy()
    expect[: len(row_group)] += np.asarray(bias)[row_group]
    np.testing.assert_allclose(np.asarray(out), expect, atol=1e-5)


@pytest.mark.parametrize(
    "change,error,match",
    [
        ({"group_sizes": jnp.asarray([7, 0, 30, 6])}, ValueError, "must sum to at most m = 30"),
        ({"group_sizes": jnp.asarray([7, -1, 13, 6])}, ValueError, "group_sizes must be >= 0"),
        ({"group_sizes": jnp.asarray([7, 13])}, ValueError, "at least one entry per group"),
        ({"group_offset": 1}, ValueError, r"group_offset must be in .* = \[0, 0\]"),
        ({"rhs": jnp.ones((4, 15, 12))}, ValueError, "k = 16 like lhs"),
        ({"rhs": jnp.ones((4, 16, 12), jnp.bfloat16)}, TypeError, "rhs .* must have the dtype of lhs"),
        ({"existing_out": jnp.ones((30, 11))}, ValueError, r"existing_out must be \[m, n\]"),
        ({"existing_out": jnp.ones((30, 12), jnp.bfloat16)}, TypeError, "existing_out .* output dtype"),
        ({"rhs_bias": jnp.ones((4, 1, 11))}, ValueError, "rhs_bias must be"),
        ({"rhs_scale": jnp.ones((4, 5, 1, 12))}, ValueError, r"rhs_scale must be \[groups, num_blocks, 1, n\]"),
        ({"rhs_scale": jnp.ones((3, 1, 1, 12))}, ValueError, r"rhs_scale must be .* = \[4, num_blocks, 1, 12\]"),
        ({"rhs_scale": jnp.ones((4, 1, 1, 12), jnp.int32)}, TypeError, "rhs_scale must have a floating dtype"),
        ({"out_shard_callback": lambda x: x}, ValueError, "out_shard_callback"),
        ({"preferred_element_type": jnp.int32}, TypeError, "preferred_element_type"),
        ({"precision": "fast"}, ValueError, "precision"),
    ],
)
def test_bad_input(arrays, change, error, match):
    lhs, rhs, sizes = arrays
    kw = {"lhs": lhs, "rhs": rhs, "group_sizes": sizes, **change}
    with pytest.raises(error, match=match):
        ejkernel.grouped_matmul(**kw)


def test_traced_group_sizes_checked_under_checks(arrays):
    lhs, rhs, _ = arrays
    f = jax.jit(lambda s: ejkernel.grouped_matmul(lhs, rhs, s))
    with ejkernel.checks(), pytest.raises(Exception, match="must sum to at most m = 30"):
        jax.block_until_ready(f(jnp.asarray([7, 0, 30, 6], jnp.int32)))


def test_earlier_options_are_accepted_and_change_nothing(arrays):
    lhs, rhs, sizes = arrays
    base = ejkernel.grouped_matmul(lhs, rhs, sizes)
    out = ejkernel.grouped_matmul(lhs, rhs, sizes, interpret=True, do_padding=False, use_v2=True, use_v3=True)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(base))


def test_config_and_dispatch(arrays):
    lhs, rhs, sizes = arrays
    with pytest.raises(ValueError, match="power of two"):
        GroupedMatmulConfig(block_m=96)
    with pytest.raises(ValueError, match="tgmm_num_stages must be positive"):
        GroupedMatmulConfig(tgmm_num_stages=0)
    cfg = GroupedMatmulConfig(block_m=128, num_stages=4, tgmm_num_stages=3)
    assert GroupedMatmulConfig.from_dict(cfg.to_dict()) == cfg
    assert GroupedMatmulConfig.from_dict({"block_m": 128}).tgmm_num_stages is None  # caches written before it
    with record_dispatches() as log:
        ejkernel.grouped_matmul(lhs, rhs, sizes, platform="xla")
    assert log[0].op == "grouped_matmul" and log[0].impl == "xla"
