"""``grouped_matmul`` on ``jax.lax.ragged_dot`` (its own transpose rules give the gradients).

A slice of the groups (``group_offset``) runs as a ragged dot over ``g + 1`` groups: a leading
group of the rows before the slice times a zero matrix, then the local groups; rows past the
slice are past the ragged dot's groups, hence zero."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ejkernel.ops.grouped_matmul.op import GroupedMatmulArgs, group_bounds, merge_rows

_PRECISION = {
    "default": jax.lax.Precision.DEFAULT,
    "high": jax.lax.Precision.HIGH,
    "highest": jax.lax.Precision.HIGHEST,
}


def grouped_matmul(a: GroupedMatmulArgs) -> jax.Array:
    rhs = jnp.swapaxes(a.rhs, 1, 2) if a.transpose_rhs else a.rhs
    sizes = a.group_sizes.astype(jnp.int32)
    if a.has_offset:
        starts, ends = group_bounds(a)
        rhs = jnp.concatenate([jnp.zeros((1, *rhs.shape[1:]), rhs.dtype), rhs])
        sizes = jnp.concatenate([starts[:1], ends - starts])
    out = jax.lax.ragged_dot(a.lhs, rhs, sizes, precision=_PRECISION[a.precision], preferred_element_type=a.out_dtype)
    return merge_rows(a, out)
