"""The static description of a flash-attention call and the per-tile math both passes share."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from .._tiling import NUM_LANES, round_up

F32 = jnp.float32
# q @ k.T without materializing the transpose: contract the last dims of both operands.
NT_DIMS = (((1,), (1,)), ((), ()))


def kernel_head_dim(d: int) -> int:
    """Head dims up to 128 are used as they are (a full-extent lane block); larger ones are
    zero-padded to a multiple of 128 so that per-row statistics tile the accumulators evenly.
    Zero columns change no dot product, and padded output columns are dropped."""
    return d if d <= NUM_LANES else round_up(d, NUM_LANES)


@dataclasses.dataclass(frozen=True)
class Spec:
    """Everything static about a call (hashable: it keys the custom VJP and the kernels)."""

    seq_q: int
    seq_k: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    head_dim_v: int
    causal: bool
    window: tuple[int, int] | None
    soft_cap: float | None
    scale: float
    num_sinks: int
    has_segments: bool
    fwd_blocks: tuple[int, int]  # (block_q, block_k)
    bwd_blocks: tuple[int, int]

    @property
    def groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def d_pad(self) -> int:
        return kernel_head_dim(self.head_dim)

    @property
    def dv_pad(self) -> int:
        return kernel_head_dim(self.head_dim_v)


def logits(spec: Spec, q: Any, k: Any) -> tuple[Any, Any]:
    """``[bq, bk]`` float32 logits ``cap·tanh(scale·q kᵀ / cap)`` and ``tanh(...)`` (for the
    soft cap's derivative; ``None`` without a cap)."""
    s = jax.lax.dot_general(q, k, NT_DIMS, preferred_element_type=F32) * spec.scale
    if spec.soft_cap is None:
        return s, None
    t = jnp.tanh(s / spec.soft_cap)
    return spec.soft_cap * t, t


def element_mask(
    spec: Spec, q_start: Any, k_start: Any, shape: tuple[int, int], q_seg: Any, kv_seg: Any, k_padded: bool
) -> Any:
    """``[bq, bk]`` bool: which (query, key) pairs of a tile are attended.

    Positions are bottom-right aligned (query ``i`` sits at key position ``i + seq_k - seq_q``).
    ``q_seg`` is the ``[bq, 128]`` lane-replicated query segment tile, ``kv_seg`` the
    ``[8, bk]`` sublane-replicated key segment tile; a query segment ``< 0`` is padding.
    """
    rows = q_start + jax.lax.broadcasted_iota(jnp.int32, shape, 0)
    cols = k_start + jax.lax.broadcasted_iota(jnp.int32, shape, 1)
    mask = None

    def both(a: Any, b: Any) -> Any:
        return b if a is None else jnp.logical_and(a, b)

    if k_padded:
        mask = both(mask, cols < spec.seq_k)
    pos = rows + (spec.seq_k - spec.seq_q)
    if spec.causal:
        mask = both(mask, cols <= pos)
    if spec.window is not None:
        left, right = spec.window
        mask = both(mask, jnp.logical_and(cols >= pos - left, cols <= pos + right))
    if q_seg is not None:
        q_ids = jnp.tile(q_seg, (1, shape[1] // NUM_LANES))  # [bq, bk]
        kv_ids = kv_seg[:1, :]  # [1, bk]
        mask = both(mask, jnp.logical_and(q_ids == kv_ids, q_ids >= 0))
    if mask is None:
        mask = jnp.ones(shape, jnp.bool_)
    return mask
