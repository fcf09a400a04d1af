"""The static description of a ``blocksparse_attention`` call, the block schedule as the kernels
read it (scalar prefetch) and the fine mask of a partial tile."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from ejkernel.ops.blocksparse_attention.mask import FLAG_ATTENTION_MASK, FLAG_SEGMENTS, FLAG_STATIC, BlockLayout

from .._tiling import NUM_LANES
from ..flash_attention._spec import kernel_head_dim

F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class Spec:
    """Everything static about a call (hashable: it keys the custom VJP and the kernels).

    ``mask_bh``: whether the pairwise ``attention_mask`` has a batch / head axis of its own
    (``None``: no pairwise mask). ``scale`` and ``soft_cap`` are read by
    :func:`ejkernel_pallas.tpu.flash_attention._spec.logits`, shared with the flash kernels.
    """

    seq_q: int
    seq_k: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    head_dim_v: int
    soft_cap: float | None
    scale: float
    num_sinks: int
    has_segments: bool
    mask_bh: tuple[bool, bool] | None
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


@dataclasses.dataclass(frozen=True)
class Schedule:
    """One direction of a :class:`BlockLayout` flattened for scalar memory (SMEM pads every axis
    of a multi-dimensional array to its tiling; 1-D arrays stay dense).

    Row ``r`` (a query tile, or a key tile when key-major) of example ``b`` visits the tiles
    ``index[slot(b, r, t)]`` for ``t < count[row(b, r)]``; slots past the count repeat the last
    visited tile, so the pipeline fetches nothing new for them. ``batched``: whether the
    metadata differs per example (segment ids or a per-example pairwise mask), else example 0's
    rows serve every example.
    """

    rows: int
    width: int
    batched: bool

    @staticmethod
    def of(layout: BlockLayout, key_major: bool) -> tuple[Schedule, tuple[Any, Any, Any, Any]]:
        if key_major:
            arrays = (layout.q_index, layout.q_count, layout.q_flags, layout.q_mask_index)
        else:
            arrays = (layout.kv_index, layout.kv_count, layout.kv_flags, layout.kv_mask_index)
        bm, rows, width = arrays[0].shape
        flat = tuple(jnp.asarray(a, jnp.int32).reshape(-1) for a in arrays)
        return Schedule(rows=rows, width=width, batched=bm > 1), flat  # type: ignore[return-value]

    def row(self, b: Any, r: Any) -> Any:
        return (b if self.batched else 0) * self.rows + r

    def slot(self, b: Any, r: Any, t: Any) -> Any:
        return self.row(b, r) * self.width + t


def fine_mask(flags: Any, block_k: int, pm_ref: Any, q_seg_ref: Any, kv_seg_ref: Any, am_ref: Any) -> Any:
    """``[bq, bk]`` bool: which pairs of a partial tile may be attended, from the fine masks its
    ``flags`` name (``FLAG_*`` bits): the tile's static pattern (``pm_ref``, key padding
    included), the document mask from the lane-replicated query ids ``[bq, 128]`` and
    sublane-replicated key ids ``[8, bk]`` (an id ``< 0`` is padding) and the pairwise mask."""
    mask = jnp.logical_or(pm_ref[...] != 0, (flags & FLAG_STATIC) == 0)
    if q_seg_ref is not None:
        q_ids = jnp.tile(q_seg_ref[...], (1, block_k // NUM_LANES))
        kv_ids = kv_seg_ref[:1, :]
        same = jnp.logical_and(q_ids == kv_ids, q_ids >= 0)
        mask = jnp.logical_and(mask, jnp.logical_or(same, (flags & FLAG_SEGMENTS) == 0))
    if am_ref is not None:
        mask = jnp.logical_and(mask, jnp.logical_or(am_ref[...] != 0, (flags & FLAG_ATTENTION_MASK) == 0))
    return mask
