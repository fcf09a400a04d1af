"""The packed KV cache of ``ragged_page_attention_v3``:
``[num_pages, page_size, ceil(2 * num_kv_heads / kv_packing), kv_packing, head_dim_padded]``.

Keys and values are interleaved over combined heads (combined head ``2h`` is the key of kv head
``h``, ``2h + 1`` its value), then packed ``kv_packing`` to a 32-bit word: combined head ``c``
lives at ``[..., c // kv_packing, c % kv_packing, :]``. ``kv_packing`` is 32 bits over the dtype's
bits (float32: 1, bfloat16/float16: 2, 8-bit: 4), and ``head_dim_padded`` the head dim rounded up
to a multiple of 128, its padding lanes zero. This is the TPU kernel's layout (a packed row is
one 32-bit sublane word per lane), kept so engines pass their cache as it is.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..families.serving import ragged_query_rows, unique_drop_index

__all__ = [
    "LANES",
    "kv_packing",
    "pack_heads",
    "padded_head_dim",
    "ragged_page_attention_v3_cache_shape",
    "ragged_page_attention_v3_pack_cache",
    "ragged_page_attention_v3_unpack_cache",
    "unpack_heads",
    "write_step",
]

#: head_dim_padded is a multiple of the TPU's 128 lanes.
LANES = 128


def kv_packing(dtype: Any) -> int:
    """How many values of ``dtype`` share one 32-bit word (float32: 1, 16-bit: 2, 8-bit: 4)."""
    bits = jnp.dtype(dtype).itemsize * 8
    if bits > 32:
        raise ValueError(f"the packed KV cache holds dtypes of at most 32 bits, got {jnp.dtype(dtype).name}")
    return 32 // bits


def padded_head_dim(head_dim: int) -> int:
    """``head_dim`` rounded up to a multiple of :data:`LANES`."""
    return -(-head_dim // LANES) * LANES


def ragged_page_attention_v3_cache_shape(
    num_pages: int, page_size: int, num_kv_heads: int, head_dim: int, dtype: Any
) -> tuple[int, int, int, int, int]:
    """The shape of a ``ragged_page_attention_v3`` KV cache of ``num_pages`` pages of ``page_size``
    tokens, ``num_kv_heads`` key/value heads of ``head_dim`` (unpadded) in ``dtype``:
    ``(num_pages, page_size, ceil(2 * num_kv_heads / kv_packing), kv_packing, head_dim_padded)``.

    Example:
        >>> import jax.numpy as jnp, ejkernel
        >>> shape = ejkernel.ragged_page_attention_v3_cache_shape(64, 16, 8, 96, jnp.bfloat16)
        >>> shape
        (64, 16, 8, 2, 128)
        >>> cache = jnp.zeros(shape, jnp.bfloat16)  # an empty cache
    """
    for name, n in (("num_pages", num_pages), ("page_size", page_size), ("num_kv_heads", num_kv_heads)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"ragged_page_attention_v3_cache_shape: {name} must be a positive int, got {n!r}")
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1:
        raise ValueError(f"ragged_page_attention_v3_cache_shape: head_dim must be a positive int, got {head_dim!r}")
    pack = kv_packing(dtype)
    return (num_pages, page_size, -(-2 * num_kv_heads // pack), pack, padded_head_dim(head_dim))


def pack_heads(keys: Any, values: Any, dtype: Any) -> jax.Array:
    """Keys and values ``[..., num_kv_heads, head_dim]`` as packed cache rows ``[...,
    ceil(2 * num_kv_heads / kv_packing), kv_packing, head_dim_padded]`` of ``dtype`` (padding zero)."""
    *lead, hk, d = keys.shape
    pack = kv_packing(dtype)
    rows = -(-2 * hk // pack)
    x = jnp.stack([keys, values], axis=-2).reshape(*lead, 2 * hk, d).astype(dtype)  # K/V interleaved
    pad = [(0, 0)] * len(lead) + [(0, rows * pack - 2 * hk), (0, padded_head_dim(d) - d)]
    return jnp.pad(x, pad).reshape(*lead, rows, pack, padded_head_dim(d))


def unpack_heads(rows: Any, num_kv_heads: int, head_dim: int) -> tuple[jax.Array, jax.Array]:
    """Packed cache rows ``[..., num_packed, kv_packing, head_dim_padded]`` as keys and values
    ``[..., num_kv_heads, head_dim]`` (read in place: a reshape and slices)."""
    *lead, n, pack, dp = rows.shape
    x = rows.reshape(*lead, n * pack, dp)[..., : 2 * num_kv_heads, :head_dim]
    return x[..., 0::2, :], x[..., 1::2, :]


def ragged_page_attention_v3_pack_cache(key_pages: Any, value_pages: Any, dtype: Any = None) -> jax.Array:
    """A ``ragged_page_attention_v3`` KV cache holding ``key_pages`` and ``value_pages``
    (``[num_pages, page_size, num_kv_heads, head_dim]`` each, e.g. a ``page_attention`` cache), in
    ``dtype`` (default: theirs)."""
    if key_pages.ndim != 4 or key_pages.shape != value_pages.shape:
        raise ValueError(
            "ragged_page_attention_v3_pack_cache: key_pages and value_pages must both be "
            f"[num_pages, page_size, num_kv_heads, head_dim], got {tuple(key_pages.shape)} and "
            f"{tuple(value_pages.shape)}"
        )
    return pack_heads(key_pages, value_pages, key_pages.dtype if dtype is None else dtype)


def ragged_page_attention_v3_unpack_cache(kv_cache: Any, num_kv_heads: int, head_dim: int) -> tuple[Any, Any]:
    """The key and value pages ``[num_pages, page_size, num_kv_heads, head_dim]`` of a
    ``ragged_page_attention_v3`` KV cache (the inverse of :func:`ragged_page_attention_v3_pack_cache`)."""
    want = ragged_page_attention_v3_cache_shape(
        int(kv_cache.shape[0]), int(kv_cache.shape[1]), num_kv_heads, head_dim, kv_cache.dtype
    )
    if tuple(kv_cache.shape) != want:
        raise ValueError(
            f"ragged_page_attention_v3_unpack_cache: a cache of {num_kv_heads} kv heads of {head_dim} in "
            f"{jnp.dtype(kv_cache.dtype).name} is {want}, got {tuple(kv_cache.shape)}"
        )
    return unpack_heads(kv_cache, num_kv_heads, head_dim)


def write_step(args: Any) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array, jax.Array]]:
    """The cache of a ``ragged_page_attention_v3`` call (its canonical arguments) with the step's
    new keys and values written, and the rows ``(seq, pos, lo, hi)`` of
    :func:`~ejkernel.ops.families.serving.ragged_query_rows`. Each live row's key and value, packed
    as the cache packs them, go to its slot in one scatter; padding rows aim past the last page
    and are dropped, so they write nothing (under ``jit`` with the cache donated, the scatter
    updates it in place). Two live rows never share a slot, so the scatter declares its indices
    unique (:func:`~ejkernel.ops.families.serving.unique_drop_index`)."""
    t_all = int(args.queries.shape[0])
    rows = ragged_query_rows(args.query_start_loc, args.kv_lens, args.num_seqs, t_all, window=args.sliding_window)
    seq, pos, lo, hi = rows
    tables = args.block_tables.reshape(args.max_num_seqs, args.pages_per_seq)
    # A row of a live sequence attends at least its own position; padding rows attend nothing.
    # Live rows own their slots (a sequence writes its new tokens to its own pages).
    page = unique_drop_index(tables[seq, jnp.clip(pos, 0) // args.page_size], hi > lo, args.num_pages)
    new = pack_heads(args.keys, args.values, args.kv_cache.dtype)  # [tokens, packed rows, packing, dp]
    cache = args.kv_cache.at[page, jnp.clip(pos, 0) % args.page_size].set(new, mode="drop", unique_indices=True)
    return cache, rows
