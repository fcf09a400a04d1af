"""The decode schedule, planned once per call (in XLA, since context lengths are traced).

The kernel's grid is ``(sequence, step)``; step ``t`` of sequence ``b`` covers pages
``t·pps .. t·pps + pps - 1`` of its block table. Only the pages a sequence needs are copied
(``[page_lo, page_hi)``: up to its length and, with a sliding window, from the window's first
token), so only steps ``[step_lo, step_hi)`` do work. While one step is attended, the copies of
the next working step, possibly of a later sequence (``next_seq``), are already in flight.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from .._tiling import cdiv


@dataclasses.dataclass(frozen=True)
class DecodePlan:
    """int32 arrays for scalar prefetch: ``lens``, ``page_lo``, ``page_hi``, ``step_lo``,
    ``step_hi``, ``next_seq`` (``[batch]``: the next sequence with work, or ``batch``), ``first``
    (``[1]``: the first sequence with work, or ``batch``) and ``tables`` (flattened
    ``[batch · steps · pps]`` page indices, clipped into the cache)."""

    lens: Any
    page_lo: Any
    page_hi: Any
    step_lo: Any
    step_hi: Any
    next_seq: Any
    first: Any
    tables: Any

    def arrays(self) -> tuple[Any, ...]:
        return (
            self.lens, self.page_lo, self.page_hi, self.step_lo, self.step_hi, self.next_seq, self.first, self.tables,
        )  # fmt: skip


def plan_decode(
    context_lens: Any,
    block_tables: Any,
    *,
    block_size: int,
    pages_per_step: int,
    num_blocks: int,
    window_left: int | None,
) -> tuple[DecodePlan, int]:
    """The plan and the number of steps per sequence (the grid's second axis)."""
    batch, max_blocks = block_tables.shape
    steps = cdiv(max_blocks, pages_per_step)
    lens = context_lens.astype(jnp.int32)
    page_hi = (lens + block_size - 1) // block_size
    page_lo = jnp.zeros_like(lens)
    if window_left is not None:  # the query at lens-1 sees tokens >= lens-1-left
        page_lo = jnp.maximum(lens - 1 - window_left, 0) // block_size
    page_lo = jnp.minimum(page_lo, page_hi)
    step_lo = page_lo // pages_per_step
    step_hi = jnp.where(page_hi > page_lo, (page_hi + pages_per_step - 1) // pages_per_step, step_lo)
    busy = step_hi > step_lo
    seq = jnp.arange(batch, dtype=jnp.int32)
    # next_seq[b] = min{b' > b : busy[b']}, else batch: a suffix minimum shifted by one.
    candidates = jnp.where(busy, seq, batch)
    suffix_min = jax.lax.cummin(candidates, axis=0, reverse=True)
    next_seq = jnp.concatenate([suffix_min[1:], jnp.full((1,), batch, jnp.int32)])
    tables = jnp.pad(block_tables.astype(jnp.int32), ((0, 0), (0, steps * pages_per_step - max_blocks)))
    # Entries past a sequence's pages may hold anything; they are never copied, but clipping
    # keeps every index the kernel computes inside the cache.
    tables = jnp.clip(tables, 0, num_blocks - 1).reshape(-1)
    plan = DecodePlan(
        lens=lens,
        page_lo=page_lo.astype(jnp.int32),
        page_hi=page_hi.astype(jnp.int32),
        step_lo=step_lo.astype(jnp.int32),
        step_hi=step_hi.astype(jnp.int32),
        next_seq=next_seq.astype(jnp.int32),
        first=suffix_min[:1].astype(jnp.int32),
        tables=tables,
    )
    return plan, steps
