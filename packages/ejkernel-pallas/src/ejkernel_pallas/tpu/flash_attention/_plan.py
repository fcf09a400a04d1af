"""Which key blocks each query block visits, planned once on the host from static shapes.

Causal and sliding-window bounds depend only on positions (there is no varlen here), so the
block ranges are known at trace time. The kernels receive them as scalar-prefetch arrays (SMEM)
and iterate only over the band of blocks a query block needs, clamping the block index of the
idle steps so that the pipeline issues no copy for them. Blocks that every row of the query
block sees entirely (and that hold no padding) run without the element mask: FlashAttention's
"causal in stages", generalized to windows.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .._tiling import cdiv


@dataclasses.dataclass(frozen=True)
class BlockPlan:
    """Per query block ``i`` (``[nq]`` int32): key blocks ``[kv_lo, kv_hi)`` to visit, of which
    ``[full_lo, full_hi)`` need no mask; per key block ``j`` (``[nk]``): query blocks
    ``[q_lo, q_hi)`` that attend it (for dK/dV). ``kv_steps``/``q_steps``: the longest range
    (the length of the reduction axis of the grid, at least 1)."""

    kv_lo: np.ndarray
    kv_hi: np.ndarray
    full_lo: np.ndarray
    full_hi: np.ndarray
    q_lo: np.ndarray
    q_hi: np.ndarray
    kv_steps: int
    q_steps: int


def row_bounds(seq_q: int, seq_k: int, causal: bool, window: tuple[int, int] | None) -> tuple[np.ndarray, np.ndarray]:
    """Per query row, the keys ``[lo, hi)`` it may attend (``hi == lo``: none), bottom-right
    aligned as ``ejkernel.ops.families.attention_math.key_bounds`` defines them."""
    pos = np.arange(seq_q, dtype=np.int64) + (seq_k - seq_q)
    lo = np.zeros(seq_q, np.int64)
    hi = np.full(seq_q, seq_k, np.int64)
    if causal:
        hi = np.minimum(hi, pos + 1)
    if window is not None:
        left, right = window
        lo = np.maximum(lo, pos - left)
        hi = np.minimum(hi, pos + right + 1)
    lo = np.clip(lo, 0, seq_k)
    hi = np.maximum(np.clip(hi, 0, seq_k), lo)
    return lo, hi


def plan_blocks(
    seq_q: int,
    seq_k: int,
    block_q: int,
    block_k: int,
    *,
    causal: bool,
    window: tuple[int, int] | None,
    always_mask: bool,
) -> BlockPlan:
    """The :class:`BlockPlan` of a call (``always_mask``: segment ids mask every block)."""
    lo, hi = row_bounds(seq_q, seq_k, causal, window)
    nq, nk = cdiv(seq_q, block_q), cdiv(seq_k, block_k)
    kv_lo = np.zeros(nq, np.int32)
    kv_hi = np.zeros(nq, np.int32)
    full_lo = np.zeros(nq, np.int32)
    full_hi = np.zeros(nq, np.int32)
    for i in range(nq):
        r_lo, r_hi = lo[i * block_q : (i + 1) * block_q], hi[i * block_q : (i + 1) * block_q]
        some = r_hi > r_lo
        if not some.any():
            continue  # no row of this block attends anything: an empty range
        kv_lo[i] = r_lo[some].min() // block_k
        kv_hi[i] = cdiv(int(r_hi[some].max()), block_k)
        # Unmasked blocks lie inside every row's range (an empty row leaves none); a partial
        # last block holds padding keys, so it never qualifies.
        f_lo, f_hi = cdiv(int(r_lo.max()), block_k), int(r_hi.min()) // block_k
        if not always_mask and f_hi > f_lo:
            full_lo[i], full_hi[i] = f_lo, f_hi
    q_lo = np.zeros(nk, np.int32)
    q_hi = np.zeros(nk, np.int32)
    rows = np.arange(seq_q)
    for j in range(nk):
        attends = (hi > lo) & (lo < (j + 1) * block_k) & (hi > j * block_k)
        if attends.any():
            q_lo[j] = rows[attends].min() // block_q
            q_hi[j] = rows[attends].max() // block_q + 1
    return BlockPlan(
        kv_lo=kv_lo,
        kv_hi=kv_hi,
        full_lo=full_lo,
        full_hi=full_hi,
        q_lo=q_lo,
        q_hi=q_hi,
        kv_steps=max(1, int((kv_hi - kv_lo).max())),
        q_steps=max(1, int((q_hi - q_lo).max())),
    )
