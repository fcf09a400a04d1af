"""Plain attention in JAX: the logits materialized, gradients by autodiff but for the softmax,
which has its own (``probabilities``)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ejkernel.ops.families.attention import AttentionArgs
from ejkernel.ops.families.attention_math import key_bounds

from .. import _tiles as T


def _softmax(s: jax.Array, sinks: jax.Array | None) -> tuple[jax.Array, jax.Array | None]:
    """The probabilities of the logits ``s`` (``-inf``: masked) and of the ``sinks`` (extra
    logits in the denominator only, ``[..., n]`` broadcasting against ``s``'s rows; or ``None``);
    a row with nothing to attend gets zeros."""
    # The guards are maxima, not selects: XLA's CPU backend then fuses the softmax into the
    # logits' matmul, as it does jax.nn.softmax (14 fusions with selects, 9 so; the plain-JAX peer
    # of benchmarks/results/cpu/attention.json). A fully masked row's maximum becomes the lowest
    # finite float (its exponentials 0), its sum the smallest normal one (its probabilities 0);
    # a row that sees a key has a sum >= 1.
    low = jnp.finfo(s.dtype)
    m = s.max(axis=-1, keepdims=True)
    if sinks is not None:
        m = jnp.maximum(m, sinks.max(axis=-1, keepdims=True))
    m = jnp.maximum(m, low.min)  # softmax is shift-invariant
    e = jnp.exp(s - m)
    denom = e.sum(axis=-1, keepdims=True)
    e_sinks = None
    if sinks is not None:
        e_sinks = jnp.exp(sinks - m)
        denom = denom + e_sinks.sum(axis=-1, keepdims=True)
    inv = 1.0 / jnp.maximum(denom, low.tiny)
    return e * inv, (None if e_sinks is None else e_sinks * inv)


# The probabilities differentiated as softmax is (dp = p (ds - Σ p ds), the sinks' terms in the
# sum): autodiff through the exponentials and the division keeps and revisits more [q, k] arrays
# (on a CPU forward+backward ran 0.65x jax.nn.dot_product_attention's so, 1.4x in this form:
# benchmarks/results/cpu/attention.json). A masked logit's tangent is zero where p = 0.


@jax.custom_jvp
def _probabilities(s: jax.Array) -> jax.Array:
    return _softmax(s, None)[0]


@_probabilities.defjvp
def _probabilities_jvp(primals: Any, tangents: Any) -> tuple[jax.Array, jax.Array]:
    (s,), (ds,) = primals, tangents
    p = _softmax(s, None)[0]
    return p, p * (ds - (p * ds).sum(axis=-1, keepdims=True))


@jax.custom_jvp
def _probabilities_with_sinks(s: jax.Array, sinks: jax.Array) -> jax.Array:
    return _softmax(s, sinks)[0]


@_probabilities_with_sinks.defjvp
def _probabilities_with_sinks_jvp(primals: Any, tangents: Any) -> tuple[jax.Array, jax.Array]:
    (s, sinks), (ds, d_sinks) = primals, tangents
    p, p_sinks = _softmax(s, sinks)
    mean = (p * ds).sum(axis=-1, keepdims=True) + (p_sinks * d_sinks).sum(axis=-1, keepdims=True)
    return p, p * (ds - mean)


def probabilities(s: jax.Array, sinks: jax.Array | None) -> jax.Array:
    """Softmax over the last axis of ``s`` (``-inf``: masked; fully masked rows get zeros), with
    ``sinks`` (or ``None``) in the denominator."""
    return (
        _probabilities(s)
        if sinks is None
        else _probabilities_with_sinks(s, jnp.broadcast_to(sinks, (*s.shape[:-1], sinks.shape[-1])))
    )


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
    p = probabilities(s, T.sink_logits(ts, args.softmax_aux))
    keep = T.keep_tile(ts, ops, args.batch, 0, 0)
    if keep is not None:
        p = jnp.where(keep, p / (1.0 - args.dropout_prob), 0.0)
    p = p.astype(weights_dtype or args.value.dtype)
    out = T.dot("bhgqk,bhkd->bhgqd", p, ops.v)
    b, hk, g, sq, sk = p.shape
    return T.from_head_major(out).astype(weights_dtype or args.dtype), p.reshape(b, hk * g, sq, sk)
