"""The reference of ``grouped_matmul``: one dense product per local group, rows selected by mask
(float32 at HIGHEST precision by default; quadratic in the groups, for tests only)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["grouped_matmul_reference", "reference"]

HIGHEST = jax.lax.Precision.HIGHEST


def grouped_matmul_reference(
    lhs: Any,
    rhs: Any,
    group_sizes: Any,
    group_offset: Any = None,
    existing_out: Any = None,
    *,
    preferred_element_type: Any = jnp.float32,
    rhs_scale: Any = None,
    rhs_bias: Any = None,
    transpose_rhs: bool = False,
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
    **ignored: Any,
) -> jax.Array:
    """``out[r] = lhs[r] @ rhs[j - group_offset]`` for the rows ``r`` of local group ``j``; the
    other rows are ``existing_out``'s (zeros without it). Computed in ``dtype`` at ``precision``.
    ``rhs_scale`` ``[g, num_blocks, 1, n]`` (or ``[g, 1, n]``, ``[g, n]``) multiplies each block
    of ``k // num_blocks`` rows of ``rhs[j]`` by its row of scales first."""
    del preferred_element_type, ignored
    rhs = jnp.swapaxes(rhs, 1, 2) if transpose_rhs else rhs
    g, m = rhs.shape[0], lhs.shape[0]
    if rhs_scale is not None:
        scale = jnp.reshape(rhs_scale, (g, -1, rhs.shape[2]))  # [g, num_blocks, n]
        rhs = rhs.astype(dtype) * jnp.repeat(scale.astype(dtype), rhs.shape[1] // scale.shape[1], axis=1)
    sizes = jnp.asarray(group_sizes).astype(jnp.int32)
    offset = jnp.asarray(0 if group_offset is None else group_offset, jnp.int32).reshape(())
    cum = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(sizes)])
    rows = jnp.arange(m)
    a = lhs.astype(dtype)
    out = jnp.zeros((m, rhs.shape[2]), dtype)
    inside = jnp.zeros((m,), bool)
    for j in range(g):
        lo, hi = cum[offset + j], cum[offset + j + 1]
        mask = (rows >= lo) & (rows < hi)
        prod = jnp.dot(a, rhs[j].astype(dtype), precision=precision, preferred_element_type=dtype)
        if rhs_bias is not None:
            prod = prod + rhs_bias.reshape(g, -1)[j].astype(dtype)
        out = jnp.where(mask[:, None], prod, out)
        inside = inside | mask
    if existing_out is not None:
        out = jnp.where(inside[:, None], out, existing_out.astype(dtype))
    return out


reference = grouped_matmul_reference
