"""The work list of ``mean_pooling`` over packed rows ("plan once, call many"): the Triton kernels'
programs and the XLA implementation's row gather on accelerators both reduce one item each.

Sequences ``0 .. num_seqs - 1`` and, as sequence ``num_seqs``, the rows outside all of them (past
``cu_seqlens[-1]``) are cut into items of at most ``split`` rows. The number of items is bounded
statically (``num_seqs + 1 + tokens // split``); unused items are empty (``lo == hi``) and belong
to sequence ``num_seqs``, whose partial sums the second pass never reads. A sequence's items are
consecutive: ``seq_first[s] .. seq_first[s] + seq_items[s] - 1`` (none for an empty sequence).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

I32 = jnp.int32


class Plan(NamedTuple):
    item_seq: jax.Array  # [items] int32
    item_lo: jax.Array  # [items] int32
    item_hi: jax.Array  # [items] int32
    seq_first: jax.Array  # [num_seqs] int32: the sequence's first item
    seq_items: jax.Array  # [num_seqs] int32: its number of items


def num_items(num_seqs: int, tokens: int, split: int) -> int:
    return num_seqs + 1 + tokens // split


def make_plan(cu_seqlens: jax.Array, tokens: int, split: int) -> Plan:
    n = cu_seqlens.shape[0] - 1
    cu = cu_seqlens.astype(I32)
    starts = jnp.concatenate([cu[:-1], cu[-1:]])  # [n + 1]: the last "sequence" is the tail
    ends = jnp.concatenate([cu[1:], jnp.full((1,), tokens, I32)])
    lengths = jnp.maximum(ends - starts, 0)
    pieces = (lengths + split - 1) // split  # [n + 1]
    first = jnp.cumsum(pieces) - pieces  # first item of each sequence
    total = first[-1] + pieces[-1]
    items = num_items(n, tokens, split)
    i = jnp.arange(items, dtype=I32)
    # Unrolled binary search (log2(n + 1) compare-and-select steps, fused by XLA): the default
    # "scan" method is a while loop, a few kernel launches per step on a GPU ahead of every call.
    seq = jnp.searchsorted(jnp.cumsum(pieces), i, side="right", method="scan_unrolled").astype(I32)
    seq_c = jnp.minimum(seq, n)
    lo = starts[seq_c] + (i - first[seq_c]) * split
    hi = jnp.minimum(lo + split, ends[seq_c])
    used = i < total
    return Plan(
        item_seq=jnp.where(used, seq_c, n).astype(I32),
        item_lo=jnp.where(used, lo, 0).astype(I32),
        item_hi=jnp.where(used, hi, 0).astype(I32),
        seq_first=first[:n].astype(I32),
        seq_items=pieces[:n].astype(I32),
    )


def row_counts(cu_seqlens: jax.Array, mask: jax.Array | None) -> jax.Array:
    """``[num_seqs]`` int32: the rows that count in each sequence, its length or, with a token
    mask, a prefix sum of the mask read at the sequence bounds (exact in int32)."""
    if mask is None:
        return (cu_seqlens[1:] - cu_seqlens[:-1]).astype(I32)
    csum = jnp.concatenate([jnp.zeros((1,), I32), jnp.cumsum(mask, dtype=I32)])
    return csum[cu_seqlens[1:]] - csum[cu_seqlens[:-1]]


def uniform_cu_seqlens(num_seqs: int, seq_len: int) -> jax.Array:
    return jnp.arange(num_seqs + 1, dtype=I32) * seq_len
