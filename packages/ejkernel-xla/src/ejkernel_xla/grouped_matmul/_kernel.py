"""``grouped_matmul`` in two forms: the tiled loop (``_tiled``, chunks of ``block_m`` rows of
one group each) or ``jax.lax.ragged_dot`` (its own transpose rules give the gradients), whose
``rhs_scale`` form is the only one here. Both compute the local groups' rows; ``merge_rows`` adds
the bias and ``existing_out``'s rows.

On ``lax.ragged_dot``, a slice of the groups (``group_offset``) runs as a ragged dot over
``g + 1`` groups: a leading group of the rows before the slice times a zero matrix, then the
local groups; rows past the slice are past the ragged dot's groups, hence zero.

``rhs_scale`` (one scale per group, block of ``k`` and column) scales the float32 products: each
block of ``k`` is its own ragged dot, whose rows are multiplied by their group's scales for that
block, so the weights are never rescaled (or rounded) in their own dtype.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ejkernel.ops.grouped_matmul.op import GroupedMatmulArgs, group_bounds, merge_rows, row_groups

from ._tiled import chunks, tiled_matmul

_PRECISION = {
    "default": jax.lax.Precision.DEFAULT,
    "high": jax.lax.Precision.HIGH,
    "highest": jax.lax.Precision.HIGHEST,
}


def grouped_matmul(a: GroupedMatmulArgs, block_m: int | None = None) -> jax.Array:
    """The op's output: the tiled form with chunks of ``block_m`` rows (at most ``m``), or
    ``lax.ragged_dot`` where ``block_m`` is ``None`` or with ``rhs_scale``."""
    if block_m is None or a.rhs_scale is not None:
        return ragged(a)
    block = min(block_m, a.m)
    starts, ends = group_bounds(a)
    out = tiled_matmul(
        a.lhs, a.rhs, chunks(starts, ends, a.m, block), block, a.transpose_rhs, _PRECISION[a.precision], a.out_dtype
    )
    return merge_rows(a, out)


def ragged(a: GroupedMatmulArgs) -> jax.Array:
    """The op's output through ``lax.ragged_dot``."""
    rhs = jnp.swapaxes(a.rhs, 1, 2) if a.transpose_rhs else a.rhs
    sizes = a.group_sizes.astype(jnp.int32)
    if a.has_offset:
        starts, ends = group_bounds(a)
        rhs = jnp.concatenate([jnp.zeros((1, *rhs.shape[1:]), rhs.dtype), rhs])
        sizes = jnp.concatenate([starts[:1], ends - starts])
    precision = _PRECISION[a.precision]
    if a.rhs_scale is None:
        out = jax.lax.ragged_dot(a.lhs, rhs, sizes, precision=precision, preferred_element_type=a.out_dtype)
        return merge_rows(a, out)
    gid = jnp.maximum(row_groups(a), 0)  # rows outside the local groups are zero products
    step = a.k // a.scale_blocks
    out = jnp.zeros((a.m, a.n), jnp.float32)
    for blk in range(a.scale_blocks):
        cols = slice(blk * step, (blk + 1) * step)
        part = jax.lax.ragged_dot(
            a.lhs[:, cols], rhs[:, cols], sizes, precision=precision, preferred_element_type=jnp.float32
        )
        out = out + part * a.rhs_scale[:, blk, 0, :].astype(jnp.float32)[gid]
    return merge_rows(a, out.astype(a.out_dtype))
