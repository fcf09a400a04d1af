"""Group metadata of the TPU grouped GEMM (megablox's ``make_group_metadata``), built on the
device from the local groups' row bounds: which (group, row tile) each grid step visits."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def group_metadata(
    starts: jax.Array, ends: jax.Array, tiles_m: int, block_m: int, *, visit_empty: bool
) -> tuple[jax.Array, jax.Array, jax.Array, int]:
    """``(group_ids[T], m_tile_ids[T], num_active[1], T)``.

    Group ``j`` spans the row tiles ``floor(starts[j] / tm) .. ceil(ends[j] / tm) - 1``; a tile
    shared by two groups is visited once per group, consecutively (the output block stays in
    VMEM between the visits, each writing its own rows). ``visit_empty`` gives an empty group one
    visit (``tgmm`` writes its zero gradient then). ``T`` is static: ``tiles_m + g - 1`` (or
    ``tiles_m + 2g`` with empty visits) bounds the visits; steps past ``num_active`` repeat the
    last visit (same blocks: no copy) and must not accumulate.
    """
    g = starts.shape[0]
    first = starts // block_m
    last = (ends + block_m - 1) // block_m  # exclusive
    count = jnp.where(ends > starts, last - first, 1 if visit_empty else 0).astype(jnp.int32)
    first = jnp.where(ends > starts, first, jnp.minimum(first, tiles_m - 1))
    cum = jnp.cumsum(count)
    total = cum[-1]
    size = tiles_m + (2 * g if visit_empty else g - 1)
    t = jnp.arange(size, dtype=jnp.int32)
    t_eff = jnp.minimum(t, jnp.maximum(total - 1, 0))
    gid = jnp.minimum(jnp.searchsorted(cum, t_eff, side="right", method="compare_all"), g - 1).astype(jnp.int32)
    mtile = (first[gid] + (t_eff - (cum[gid] - count[gid]))).astype(jnp.int32)
    mtile = jnp.clip(mtile, 0, tiles_m - 1)
    return gid, mtile, total.reshape(1).astype(jnp.int32), size
