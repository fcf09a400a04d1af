"""The reference of the dense attention ops: plain ``jnp``, quadratic memory, float32 at HIGHEST
precision by default.

Written from the ops' documented semantics, independently of the kernels' helpers (masks are
built from index grids, varlen is a Python loop over sequences), so it can catch a kernel and its
canonicalization being wrong together. The one shared piece is
:func:`~ejkernel.ops.families.attention_math.dropout_keep_mask`, which *defines* which weights
dropout drops. ``cum_seqlens`` must be concrete (not traced).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ...types.mask_info import MaskInfo, canonical_window
from ..families.attention_math import dropout_keep_mask

__all__ = ["HIGHEST", "attention_reference", "reference"]

HIGHEST = jax.lax.Precision.HIGHEST


def _dense(
    q: Any,
    k: Any,
    v: Any,
    bias: Any,
    pair_mask: Any,
    *,
    causal: bool,
    scale: float,
    window: tuple[int, int] | None,
    soft_cap: float | None,
    aux: Any,
    dropout_prob: float,
    dropout_seed: Any,
    q_offset: int,
    k_offset: int,
    dtype: Any,
    precision: Any,
    return_weights: bool = False,
) -> Any:
    b, sq, h, _ = q.shape
    sk, hk = k.shape[1], k.shape[2]
    g = h // hk
    q, k, v = (x.astype(dtype) for x in (q, k, v))
    k = jnp.repeat(k, g, axis=2)  # query head j ↔ kv head j // g
    v = jnp.repeat(v, g, axis=2)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k, precision=precision) * jnp.asarray(scale, dtype)
    if soft_cap is not None:
        s = soft_cap * jnp.tanh(s / soft_cap)
    if bias is not None:
        s = s + bias.astype(dtype)
    i = jnp.arange(sq)[:, None] + (sk - sq)
    j = jnp.arange(sk)[None, :]
    allowed = jnp.ones((b, h, sq, sk), bool)
    if causal:
        allowed &= j <= i
    if window is not None:
        allowed &= (j >= i - window[0]) & (j <= i + window[1])
    if pair_mask is not None:
        allowed &= pair_mask
    s = jnp.where(allowed, s, -jnp.inf)
    if aux is not None:
        aux2 = aux if aux.ndim == 2 else aux[:, None]
        sinks = jnp.broadcast_to(aux2.astype(dtype)[None, :, None, :], (b, h, sq, aux2.shape[1]))
        s_all = jnp.concatenate([s, sinks], axis=-1)
    else:
        s_all = s
    m = jax.lax.stop_gradient(jnp.max(s_all, axis=-1, keepdims=True))
    m = jnp.where(jnp.isfinite(m), m, 0)
    e = jnp.exp(s_all - m)
    denom = e.sum(axis=-1, keepdims=True)
    p = (e / jnp.where(denom > 0, denom, 1))[..., :sk]
    if dropout_prob > 0:
        bh = jnp.arange(b)[:, None, None, None] * h + jnp.arange(h)[None, :, None, None]
        keep = dropout_keep_mask(dropout_seed, bh, q_offset + jnp.arange(sq)[:, None], k_offset + j, dropout_prob)
        p = jnp.where(keep, p / (1 - dropout_prob), 0)
    out = jnp.einsum("bhqk,bkhd->bqhd", p, v, precision=precision)
    return (out, p) if return_weights else out


def attention_reference(
    query: Any,
    key: Any,
    value: Any,
    bias: Any = None,
    *,
    mask_info: MaskInfo | None = None,
    causal: bool = False,
    softmax_scale: float | None = None,
    sliding_window: int | tuple[int, int] | None = None,
    logits_soft_cap: float | None = None,
    dropout_prob: float = 0.0,
    dropout_seed: Any = None,
    cum_seqlens_q: Any = None,
    cum_seqlens_k: Any = None,
    softmax_aux: Any = None,
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
    return_weights: bool = False,
) -> Any:
    """The reference of ``flash_attention`` / ``scaled_dot_product_attention`` (same arguments).

    ``return_weights``: also return the attention weights ``[batch, heads, seq_q, seq_k]``
    (after dropout), as ``(output, weights)``; dense (not varlen) calls only.

    ``dtype`` is the compute dtype and ``precision`` the matmul precision: float32 at HIGHEST by
    default; pass the inputs' low-precision dtype (or ``precision=DEFAULT``, which is TF32 for
    float32 on recent GPUs) to measure how much error low precision alone makes.
    """
    d = query.shape[-1]
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    window = canonical_window(sliding_window)
    pair = None
    if mask_info is not None:
        causal = causal or mask_info.causal
        window = window or mask_info.sliding_window
        if mask_info.q_segment_ids is not None:
            qs, ks = mask_info.q_segment_ids, mask_info.kv_segment_ids
            pair = ((qs[:, :, None] == ks[:, None, :]) & (qs[:, :, None] >= 0))[:, None]
        if mask_info.stored_attention_mask is not None:
            m = mask_info.stored_attention_mask
            pair = m if pair is None else pair & m
    seed = None if dropout_prob == 0 else jnp.asarray(dropout_seed).astype(jnp.uint32)
    common = dict(
        scale=scale,
        window=window,
        soft_cap=logits_soft_cap,
        aux=softmax_aux,
        dropout_prob=dropout_prob,
        dropout_seed=seed,
        dtype=dtype,
        precision=precision,
    )
    if cum_seqlens_q is None:
        return _dense(
            query,
            key,
            value,
            bias,
            pair,
            causal=causal,
            q_offset=0,
            k_offset=0,
            return_weights=return_weights,
            **common,
        )
    if return_weights:
        raise ValueError("attention_reference: return_weights needs a dense (not varlen) call")

    cu_q = np.asarray(cum_seqlens_q)
    cu_k = cu_q if cum_seqlens_k is None else np.asarray(cum_seqlens_k)
    bias4 = None if bias is None else jnp.reshape(bias, (1,) * (4 - bias.ndim) + tuple(bias.shape))
    out = jnp.zeros(query.shape[:3] + value.shape[3:], dtype)
    for s in range(len(cu_q) - 1):
        q0, q1, k0, k1 = int(cu_q[s]), int(cu_q[s + 1]), int(cu_k[s]), int(cu_k[s + 1])
        if q1 == q0:
            continue
        b_s = None
        if bias4 is not None:
            b_s = bias4
            if b_s.shape[2] > 1:
                b_s = b_s[:, :, q0:q1]
            if b_s.shape[3] > 1:
                b_s = b_s[:, :, :, k0:k1]
        o = _dense(
            query[:, q0:q1],
            key[:, k0:k1],
            value[:, k0:k1],
            b_s,
            None,
            causal=causal,
            q_offset=q0,
            k_offset=k0,
            **common,
        )
        out = out.at[:, q0:q1].set(o)
    return out


reference = attention_reference
