"""The zig-zag sequence layout that balances causal ring attention across devices."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["LAYOUTS", "zigzag_permute", "zigzag_unpermute"]

LAYOUTS = ("contiguous", "zigzag")


def _zigzag_order(num_shards: int) -> np.ndarray:
    """Chunk order of the zig-zag layout: device ``r`` holds chunks ``r`` and ``2P - 1 - r``."""
    return np.array([c for r in range(num_shards) for c in (r, 2 * num_shards - 1 - r)])


def _permute_chunks(x: Any, num_shards: int, axis: int, order: np.ndarray, name: str) -> jax.Array:
    x = jnp.asarray(x)
    if isinstance(num_shards, bool) or not isinstance(num_shards, (int, np.integer)) or num_shards < 1:
        raise ValueError(f"{name}: num_shards must be a positive int, got {num_shards!r}")
    axis = axis % x.ndim
    n, parts = x.shape[axis], 2 * int(num_shards)
    if n % parts:
        raise ValueError(
            f"{name}: axis {axis} of length {n} (shape {tuple(x.shape)}) does not split into 2 × {num_shards} = "
            f"{parts} equal chunks"
        )
    chunks = x.reshape(*x.shape[:axis], parts, n // parts, *x.shape[axis + 1 :])
    return jnp.take(chunks, jnp.asarray(order), axis=axis).reshape(x.shape)


def zigzag_permute(x: Any, num_shards: int, axis: int = 1) -> jax.Array:
    """Reorder a sequence axis into the zig-zag layout that balances causal ring attention.

    The axis is cut into ``2 · num_shards`` equal chunks; shard ``r`` (of a contiguous split of
    the result) gets chunks ``r`` and ``2 · num_shards - 1 - r``, so every device has as much
    work under a causal mask. Apply it to everything indexed by the sequence (query, key, value,
    segment ids, position ids; both sequence axes of a bias or a pairwise mask), call
    ``ring_attention(..., layout="zigzag")``, and undo it on the output with
    :func:`zigzag_unpermute`.

    >>> zigzag_permute(jnp.arange(8), 2, axis=0)
    Array([0, 1, 6, 7, 2, 3, 4, 5], dtype=int32)
    """
    return _permute_chunks(x, num_shards, axis, _zigzag_order(num_shards), "zigzag_permute")


def zigzag_unpermute(x: Any, num_shards: int, axis: int = 1) -> jax.Array:
    """The inverse of :func:`zigzag_permute`: back to the natural sequence order."""
    return _permute_chunks(x, num_shards, axis, np.argsort(_zigzag_order(num_shards)), "zigzag_unpermute")
