"""The ragged schedule, planned once per call in XLA (lengths, ``query_start_loc`` and
``num_seqs`` may be traced), scalar-prefetched into SMEM for the kernel.

The kernel's grid walks query blocks of ``block_q`` packed rows. The sequences with queries
(live, ``q_len > 0``) are listed first, in their order (``seq``), so those overlapping query block
``b`` are the consecutive entries ``[seq_lo[b], seq_hi[b])`` of that list: a block of decodes
holds many sequences, a long prefill chunk spans many blocks. Query blocks with no such sequence
(padding rows only) do no work, and ``next_blk[b]`` names the next block that does, so the
kernel can prefetch its first pages across the idle ones.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from .._tiling import cdiv


@dataclasses.dataclass(frozen=True)
class RaggedPlan:
    """int32 arrays for scalar prefetch.

    ``[max_num_seqs]``, entry ``i`` the ``i``-th sequence with queries (entries past the last hold
    an empty query range past every block): ``seq`` (its index in the batch), ``q_start``,
    ``q_end`` (its packed rows) and ``kv_len`` (its context length). ``[num_q_blocks]``:
    ``seq_lo``, ``seq_hi`` (the entries overlapping the block) and ``next_blk`` (the next busy
    block, or ``num_q_blocks``). ``first`` ``[1]``: the first busy block, or ``num_q_blocks``.
    ``tables``: the flattened ``[max_num_seqs * pages_per_seq]`` block tables, clipped into the
    cache (entries no sequence uses may hold anything; they are never copied, but every index the
    kernel computes stays inside the cache).
    """

    seq: Any
    q_start: Any
    q_end: Any
    kv_len: Any
    seq_lo: Any
    seq_hi: Any
    next_blk: Any
    first: Any
    tables: Any

    def arrays(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))


def plan_ragged(
    query_start_loc: Any,
    context_lens: Any,
    block_tables: Any,
    num_seqs: Any,
    *,
    total_tokens: int,
    block_q: int,
    num_pages: int,
) -> tuple[RaggedPlan, int]:
    """The plan and the number of query blocks (the grid)."""
    m = context_lens.shape[0]
    num_q_blocks = cdiv(total_tokens, block_q)
    qsl = query_start_loc.astype(jnp.int32)
    idx = jnp.arange(m, dtype=jnp.int32)
    has_queries = (idx < num_seqs) & (qsl[1:] > qsl[:-1])
    # Stable: the sequences with queries first, in batch order (so their row ranges ascend).
    seq = jnp.argsort(jnp.where(has_queries, 0, 1), stable=True).astype(jnp.int32)
    listed = idx < jnp.sum(has_queries)
    past = num_q_blocks * block_q  # the entries past the last sit after every block
    q_start = jnp.where(listed, qsl[seq], past)
    q_end = jnp.where(listed, qsl[seq + 1], past)
    blk_start = jnp.arange(num_q_blocks, dtype=jnp.int32) * block_q
    # Entries ending at or before the block's first row precede it; those starting before its end
    # reach it (both counts ascend with the block since the ranges ascend and do not overlap).
    seq_lo = jnp.searchsorted(q_end, blk_start, side="right").astype(jnp.int32)
    seq_hi = jnp.searchsorted(q_start, blk_start + block_q, side="left").astype(jnp.int32)
    seq_hi = jnp.maximum(seq_hi, seq_lo)
    busy = seq_hi > seq_lo
    # next_blk[b] = min{b' > b : busy[b']}, else num_q_blocks: a suffix minimum shifted by one.
    suffix_min = jax.lax.cummin(jnp.where(busy, jnp.arange(num_q_blocks, dtype=jnp.int32), num_q_blocks), reverse=True)
    next_blk = jnp.concatenate([suffix_min[1:], jnp.full((1,), num_q_blocks, jnp.int32)])
    plan = RaggedPlan(
        seq=seq,
        q_start=q_start.astype(jnp.int32),
        q_end=q_end.astype(jnp.int32),
        kv_len=context_lens.astype(jnp.int32)[seq],
        seq_lo=seq_lo,
        seq_hi=seq_hi,
        next_blk=next_blk.astype(jnp.int32),
        first=suffix_min[:1].astype(jnp.int32),
        tables=jnp.clip(block_tables.astype(jnp.int32), 0, num_pages - 1).reshape(-1),
    )
    return plan, num_q_blocks
