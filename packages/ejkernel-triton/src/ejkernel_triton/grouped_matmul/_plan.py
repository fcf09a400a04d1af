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
    starts: jax.Array, ends: jax.Array, m: int, block_m: int, extra_m: int = 0
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """The number of tiles (``[1]``) and, per tile: its segment (``j >= 0``: local group ``j``; ``-1``: rows outside the local groups,
    written as zeros; ``-2``: past the schedule), its first row and its end row (exclusive).

    The segments cover ``[0, m)`` in order: ``[0, starts[0])``, the groups, ``[ends[-1], m)``;
    each is cut into ``ceil(size / block_m)`` tiles (none when empty). With ``extra_m > 0`` a
    group of more than one tile whose last tile would hold at most ``extra_m`` rows has that
    tile merged into the one before it (``block_m + r`` rows, ``r <= extra_m``): the kernel
    computes those rows with a second ``extra_m``-row product over the same ``b`` tile, and the
    group's ``b`` columns are read by one program fewer. A tile's end row is ``row0 + block_m``
    except for a segment's last tile (the segment's end)."""
    g = starts.shape[0]
    zero = jnp.zeros((1,), jnp.int32)
    seg_lo = jnp.concatenate([zero, starts, ends[-1:]])
    seg_hi = jnp.concatenate([starts[:1], ends, jnp.full((1,), m, jnp.int32)])
    seg_id = jnp.concatenate(
        [jnp.full((1,), -1, jnp.int32), jnp.arange(g, dtype=jnp.int32), jnp.full((1,), -1, jnp.int32)]
    )
    size = jnp.maximum(seg_hi - seg_lo, 0)
    ntiles = (size + block_m - 1) // block_m
    if extra_m:
        last = size - (ntiles - 1) * block_m  # rows of the last whole-tile cut
        ntiles = jnp.where((seg_id >= 0) & (ntiles >= 2) & (last <= extra_m), ntiles - 1, ntiles)
    cum = jnp.cumsum(ntiles)
    t = jnp.arange(max_tiles(m, g, block_m), dtype=jnp.int32)
    s = jnp.minimum(jnp.searchsorted(cum, t, side="right", method="compare_all"), g + 1).astype(jnp.int32)
    valid = t < cum[-1]
    i = t - (cum[s] - ntiles[s])  # the tile's index in its segment
    row0 = seg_lo[s] + i * block_m
    row_end = jnp.where(i == ntiles[s] - 1, seg_hi[s], jnp.minimum(row0 + block_m, seg_hi[s]))
    tile_seg = jnp.where(valid, seg_id[s], -2)
    return tile_seg, jnp.where(valid, row0, 0), jnp.where(valid, row_end, 0), cum[-1:].astype(jnp.int32)


def tgmm_schedule(
    starts: jax.Array, ends: jax.Array, m: int, block_k: int, parts: int
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """The row chunks of the streaming ``drhs`` kernel (``_kernel.tgmm_stream_kernel``): per
    local group, its rows cut into ``block_k``-row chunks (one empty chunk for an empty group,
    so that its zeros are written), in group order; and ``parts + 1`` chunk indices splitting
    them into ``parts`` runs of whole groups of about equal length (a run may be empty).

    Returns per chunk (``cdiv(m, block_k) + g + 1`` entries, ``-1`` past the end): its group,
    first row and end row (the group's end); and the runs' bounds."""
    g = starts.shape[0]
    size = jnp.maximum(ends - starts, 0)
    n = jnp.maximum((size + block_k - 1) // block_k, 1)
    cum = jnp.cumsum(n)
    total = cum[-1]
    t = jnp.arange(-(-m // block_k) + g + 1, dtype=jnp.int32)
    grp = jnp.minimum(jnp.searchsorted(cum, t, side="right", method="compare_all"), g - 1).astype(jnp.int32)
    valid = t < total
    first = cum - n  # each group's first chunk
    row0 = starts[grp] + (t - first[grp]) * block_k
    target = (jnp.arange(parts + 1, dtype=jnp.int32) * total) // parts
    at = jnp.searchsorted(first, target, side="left", method="compare_all")  # first group starting at or after
    bounds = jnp.where(at < g, first[jnp.minimum(at, g - 1)], total).astype(jnp.int32)
    return (
        jnp.where(valid, grp, -1),
        jnp.where(valid, row0, 0),
        jnp.where(valid, ends[grp], 0),
        bounds,
    )
