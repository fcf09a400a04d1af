"""The tile schedule of the grouped GEMM, built on the device from the group bounds ("plan once,
call many": megablox's ``make_group_metadata``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def max_tiles(m: int, groups: int, block_m: int) -> int:
    """An upper bound of the schedule's length: ``sum ceil(s_i / B) <= m / B + segments``, with
    ``groups + 2`` segments (the local groups and the rows before and after them)."""
    return -(-m // block_m) + groups + 2


def gmm_schedule(
    starts: jax.Array, ends: jax.Array, m: int, block_m: int
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """The number of tiles (``[1]``) and, per tile: its segment (``j >= 0``: local group ``j``; ``-1``: rows outside the local groups,
    written as zeros; ``-2``: past the schedule), its first row and its segment's end row.

    The segments cover ``[0, m)`` in order: ``[0, starts[0])``, the groups, ``[ends[-1], m)``;
    each is cut into ``ceil(size / block_m)`` tiles (none when empty)."""
    g = starts.shape[0]
    zero = jnp.zeros((1,), jnp.int32)
    seg_lo = jnp.concatenate([zero, starts, ends[-1:]])
    seg_hi = jnp.concatenate([starts[:1], ends, jnp.full((1,), m, jnp.int32)])
    seg_id = jnp.concatenate(
        [jnp.full((1,), -1, jnp.int32), jnp.arange(g, dtype=jnp.int32), jnp.full((1,), -1, jnp.int32)]
    )
    ntiles = (jnp.maximum(seg_hi - seg_lo, 0) + block_m - 1) // block_m
    cum = jnp.cumsum(ntiles)
    t = jnp.arange(max_tiles(m, g, block_m), dtype=jnp.int32)
    s = jnp.minimum(jnp.searchsorted(cum, t, side="right", method="compare_all"), g + 1).astype(jnp.int32)
    valid = t < cum[-1]
    row0 = seg_lo[s] + (t - (cum[s] - ntiles[s])) * block_m
    tile_seg = jnp.where(valid, seg_id[s], -2)
    return tile_seg, jnp.where(valid, row0, 0), jnp.where(valid, seg_hi[s], 0), cum[-1:].astype(jnp.int32)
