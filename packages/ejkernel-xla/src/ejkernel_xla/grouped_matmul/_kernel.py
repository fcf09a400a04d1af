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

Unscaled, the ragged dot's backward takes the output's cotangent in ``lhs``'s dtype, as the Triton
implementation's does: with the op's default float32 output and bfloat16 inputs, JAX's own
transposes multiplied a float32 cotangent by the bfloat16 weights in float32, and the XLA
forward+backward took 18.0 ms on an H200 against 9.5 ms for ``lax.ragged_dot`` with bfloat16
outputs (``m16384 k4096 n2048 g8``, ``benchmarks/results/h200/grouped_matmul.json``).
"""

from __future__ import annotations

import functools

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
        return merge_rows(a, _ragged_dot(a.lhs, rhs, sizes, precision, a.out_dtype))
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


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _ragged_dot(lhs: jax.Array, rhs: jax.Array, sizes: jax.Array, precision: jax.lax.Precision, out_dtype) -> jax.Array:
    return jax.lax.ragged_dot(lhs, rhs, sizes, precision=precision, preferred_element_type=out_dtype)


def _ragged_dot_fwd(lhs, rhs, sizes, precision, out_dtype):
    return _ragged_dot(lhs, rhs, sizes, precision, out_dtype), (lhs, rhs, sizes)


def _ragged_dot_bwd(precision, out_dtype, res, dout):
    lhs, rhs, sizes = res
    _, vjp = jax.vjp(
        lambda x, w: jax.lax.ragged_dot(x, w, sizes, precision=precision, preferred_element_type=lhs.dtype), lhs, rhs
    )
    dlhs, drhs = vjp(dout.astype(lhs.dtype))
    return dlhs, drhs.astype(rhs.dtype), None


_ragged_dot.defvjp(_ragged_dot_fwd, _ragged_dot_bwd)
