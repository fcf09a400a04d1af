"""Plain attention in JAX: the logits materialized, gradients by autodiff."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ejkernel.ops.families.attention import AttentionArgs
from ejkernel.ops.families.attention_math import key_bounds

from .. import _tiles as T


def scaled_dot_product_attention(args: AttentionArgs) -> jax.Array:
    return attend(args)[0]


def attend(args: AttentionArgs, weights_dtype: Any = None) -> tuple[jax.Array, jax.Array]:
    """``(output [b, sq, h, dv], weights [b, h, sq, sk])``: the weights after dropout, cast to
    ``weights_dtype`` (default: the value's dtype) before they multiply the values."""
    # One tile spanning both sequences: the tile helpers then describe the whole problem.
    ts = T.tile_spec(args, args.seq_q, args.seq_k)
    lo, hi = key_bounds(args)
    ops = T.prepare(
        ts,
        args.query,
        args.key,
        args.value,
        args.bias,
        lo,
        hi,
        args.q_segment_ids,
        args.kv_segment_ids,
        args.attention_mask,
        args.dropout_seed,
    )
    s, _ = T.logits(ts, ops.q, ops.k, T.bias_tile(ts, ops, 0, 0))  # [b, hk, g, sq, sk]
    s = T.masked(s, T.valid_tile(ts, ops, ops.lo, ops.hi, ops.q_seg, 0, 0))
    m = s.max(axis=-1)
    sinks = T.sink_logits(ts, args.softmax_aux)
    if sinks is not None:
        m = jnp.maximum(m, sinks.max(axis=-1))
    m = jax.lax.stop_gradient(jnp.where(m == -jnp.inf, 0.0, m))  # softmax is shift-invariant
    e = jnp.exp(s - m[..., None])
    denom = e.sum(axis=-1)
    if sinks is not None:
        denom = denom + jnp.exp(sinks - m[..., None]).sum(axis=-1)
    p = e / jnp.where(denom > 0, denom, 1.0)[..., None]
    keep = T.keep_tile(ts, ops, args.batch, 0, 0)
    if keep is not None:
        p = jnp.where(keep, p / (1.0 - args.dropout_prob), 0.0)
    p = p.astype(weights_dtype or args.value.dtype)
    out = T.dot("bhgqk,bhkd->bhgqd", p, ops.v)
    b, hk, g, sq, sk = p.shape
    return T.from_head_major(out).astype(weights_dtype or args.dtype), p.reshape(b, hk * g, sq, sk)
