"""Mean pooling in plain JAX, accumulating in float32.

- Dense (``[batch, seq, hidden]``): a reduction over the sequence axis.
- Packed rows (``cu_seqlens``), ``split_size`` None (the CPU's choice): a segment sum of the rows;
  XLA differentiates it (the gradient is a gather).
- Packed rows with ``split_size`` (accelerators): the rows are cut into items of at most
  ``split_size`` rows of one sequence (``ejkernel.ops.mean_pooling.plan``, the Triton kernels'
  work list); each item's rows are gathered and summed, then a segment sum adds each sequence's
  few items. A segment sum of the rows themselves adds every row into its sequence's sums with
  atomics, two orders of magnitude slower on an H200 (``benchmarks/results/h200/mean_pooling.json``,
  (262144, 4096) bf16 in 64 sequences). The gradient is its own (a gather of each row's
  sequence's ``dout / count``), not XLA's transpose of the gather, a scatter-add.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from ejkernel.ops.mean_pooling import MeanPoolingArgs
from ejkernel.ops.mean_pooling.plan import make_plan, row_counts

F32 = jnp.float32


def token_segments(cu_seqlens: jax.Array, tokens: int) -> jax.Array:
    """Each row's sequence index (``num_seqs`` for rows outside every sequence)."""
    pos = jnp.arange(tokens, dtype=jnp.int32)
    seg = jnp.searchsorted(cu_seqlens[1:], pos, side="right", method="scan_unrolled").astype(jnp.int32)
    outside = (pos < cu_seqlens[0]) | (pos >= cu_seqlens[-1])
    return jnp.where(outside, cu_seqlens.shape[0] - 1, seg)


def _mean(sums: jax.Array, counts: jax.Array, dtype: jnp.dtype) -> jax.Array:
    c = counts.astype(F32)[:, None]
    return jnp.where(c > 0, sums / jnp.maximum(c, 1.0), 0.0).astype(dtype)


def _item_sums(x: jax.Array, mask: jax.Array | None, cu: jax.Array, split: int) -> jax.Array:
    """``[num_seqs, hidden]`` float32 sums of each sequence's rows (those ``mask`` keeps), item by item."""
    tokens, n = x.shape[0], cu.shape[0] - 1
    plan = make_plan(cu, tokens, split)
    rows = plan.item_lo[:, None] + jnp.arange(split, dtype=jnp.int32)[None, :]  # [items, split]
    inside = rows < plan.item_hi[:, None]
    rows = jnp.minimum(rows, tokens - 1)
    if mask is not None:
        inside = inside & mask[rows]
    part = jnp.sum(jnp.where(inside[..., None], x[rows].astype(F32), 0.0), axis=1)  # [items, hidden]
    # Items are in sequence order; unused ones (and the tail's) belong to sequence n, dropped.
    return jax.ops.segment_sum(part, plan.item_seq, num_segments=n + 1, indices_are_sorted=True)[:n]


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _packed_sums(x: jax.Array, mask: jax.Array | None, cu: jax.Array, split: int) -> jax.Array:
    return _item_sums(x, mask, cu, split)


def _packed_sums_fwd(x, mask, cu, split):
    # ``like``: x's row count and dtype, no data.
    return _item_sums(x, mask, cu, split), (mask, cu, jnp.zeros((x.shape[0], 0), x.dtype))


def _packed_sums_bwd(split, res, g):
    mask, cu, like = res
    n = cu.shape[0] - 1
    seg = token_segments(cu, like.shape[0])
    valid = seg < n if mask is None else (seg < n) & mask
    dx = jnp.where(valid[:, None], g[jnp.minimum(seg, n - 1)], 0.0).astype(like.dtype)
    return dx, None, None


_packed_sums.defvjp(_packed_sums_fwd, _packed_sums_bwd)


def mean_pooling(args: MeanPoolingArgs, split: int | None = None) -> jax.Array:
    x, mask, n, hidden = args.x, args.attention_mask, args.num_seqs, args.hidden
    if args.cu_seqlens is None:  # consecutive runs of seq_len rows
        xs = x.reshape(n, args.seq_len, hidden)
        if mask is None:
            sums = jnp.sum(xs, axis=1, dtype=F32)
            counts = jnp.full((n,), args.seq_len, jnp.int32)
        else:
            m = mask.reshape(n, args.seq_len)
            sums = jnp.sum(jnp.where(m[..., None], xs.astype(F32), 0.0), axis=1)
            counts = jnp.sum(m, axis=1, dtype=jnp.int32)
    elif split and n > 0 and args.tokens > 0:
        cu = jnp.clip(args.cu_seqlens.astype(jnp.int32), 0, args.tokens)
        keep = None if mask is None else mask.astype(bool)
        sums = _packed_sums(x, keep, cu, split)
        counts = row_counts(cu, keep)
    elif mask is None:
        # Each row's sequence shifted by one (n + 1 for rows past the last sequence): the ids stay
        # sorted, so the segment sum may say so, and no select runs over the rows (the form below
        # ran 0.84x the segment sum of precomputed ids on a CPU: benchmarks/results/cpu/mean_pooling.json).
        cu = jnp.clip(args.cu_seqlens.astype(jnp.int32), 0, args.tokens)
        seg = jnp.searchsorted(cu, jnp.arange(args.tokens, dtype=jnp.int32), side="right", method="scan_unrolled")
        sums = jax.ops.segment_sum(x.astype(F32), seg, num_segments=n + 2, indices_are_sorted=True)[1 : n + 1]
        counts = row_counts(cu, None)
    else:
        seg = token_segments(args.cu_seqlens, args.tokens)
        valid = (seg < n) & mask
        # Masked rows are routed to the dropped segment n rather than zeroed: a select over the
        # rows before the scatter makes XLA:CPU materialize them, 4x slower than the plain
        # segment sum (32768 x 1024 float32 in 64 sequences, shared 2-core CPU: 59 ms vs 15 ms).
        seg = jnp.where(valid, seg, n)
        sums = jax.ops.segment_sum(x.astype(F32), seg, num_segments=n + 1)[:n]
        counts = jax.ops.segment_sum(valid.astype(jnp.int32), seg, num_segments=n + 1)[:n]
    return _mean(sums, counts, x.dtype).reshape(args.out_shape)
