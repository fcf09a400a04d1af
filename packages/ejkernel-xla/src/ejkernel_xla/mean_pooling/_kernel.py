"""Mean pooling in plain JAX: a reduction over the sequence axis (dense) or a segment sum over
packed rows, both accumulating in float32; XLA differentiates it (the gradient is a gather)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ejkernel.ops.mean_pooling import MeanPoolingArgs

F32 = jnp.float32


def token_segments(cu_seqlens: jax.Array, tokens: int) -> jax.Array:
    """Each row's sequence index (``num_seqs`` for rows outside every sequence)."""
    pos = jnp.arange(tokens, dtype=jnp.int32)
    seg = jnp.searchsorted(cu_seqlens[1:], pos, side="right").astype(jnp.int32)
    outside = (pos < cu_seqlens[0]) | (pos >= cu_seqlens[-1])
    return jnp.where(outside, cu_seqlens.shape[0] - 1, seg)


def _mean(sums: jax.Array, counts: jax.Array, dtype: jnp.dtype) -> jax.Array:
    c = counts.astype(F32)[:, None]
    return jnp.where(c > 0, sums / jnp.maximum(c, 1.0), 0.0).astype(dtype)


def mean_pooling(args: MeanPoolingArgs) -> jax.Array:
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
    else:
        seg = token_segments(args.cu_seqlens, args.tokens)
        valid = seg < n if mask is None else (seg < n) & mask
        rows = jnp.where(valid[:, None], x.astype(F32), 0.0)
        sums = jax.ops.segment_sum(rows, seg, num_segments=n, indices_are_sorted=True)
        counts = jax.ops.segment_sum(valid.astype(jnp.int32), seg, num_segments=n, indices_are_sorted=True)
    return _mean(sums, counts, x.dtype).reshape(args.out_shape)
