"""The reference of ``ragged_decode_attention``: dense masked attention over the whole cache
(float32 at HIGHEST precision by default): every logit ``[batch, heads, kv_len]`` at once, the
keys outside ``[start, end)`` (and the window) masked."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..families.serving import sinks_per_head
from ..flash_attention.reference import HIGHEST

__all__ = ["ragged_decode_attention_reference", "reference"]


def ragged_decode_attention_reference(
    query: Any,
    key: Any,
    value: Any,
    sequence_start: Any,
    sequence_end: Any,
    softmax_aux: Any = None,
    *,
    softmax_scale: float | None = None,
    sliding_window: int | tuple[int, int] | None = None,
    logits_soft_cap: float | None = None,
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
) -> jax.Array:
    """The reference of ``ragged_decode_attention``: each query (the last token of its range) over
    every key of its row, those outside the range masked; an empty range gives zeros."""
    squeeze = query.ndim == 3
    q = (query if squeeze else query[:, 0]).astype(dtype)
    b, h, d = q.shape
    s, hk = key.shape[1], key.shape[2]
    heads = jnp.arange(h) // (h // hk)  # the kv head of each query head
    k = key.astype(dtype)[:, :, heads]
    t = jnp.arange(s)[None, :]
    start, end = jnp.asarray(sequence_start)[:, None], jnp.asarray(sequence_end)[:, None]
    valid = (t >= start) & (t < end)  # [b, s]
    if sliding_window is not None:
        left = sliding_window if isinstance(sliding_window, int) else sliding_window[0]
        valid &= t >= end - 1 - left
    v = jnp.where(valid[:, :, None, None], value.astype(dtype), 0)[:, :, heads]
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    logits = jnp.einsum("bhd,bshd->bhs", q, jnp.where(valid[:, :, None, None], k, 0), precision=precision) * scale
    if logits_soft_cap is not None:
        logits = logits_soft_cap * jnp.tanh(logits / logits_soft_cap)
    logits = jnp.where(valid[:, None, :], logits, -jnp.inf)
    aux = sinks_per_head(softmax_aux, h)
    if aux is not None:
        logits = jnp.concatenate([logits, jnp.broadcast_to(aux.astype(dtype)[None], (b, *aux.shape))], axis=-1)
    m = jnp.max(logits, axis=-1, keepdims=True)
    e = jnp.exp(logits - jnp.where(jnp.isfinite(m), m, 0))
    denom = e.sum(axis=-1, keepdims=True)
    p = (e / jnp.where(denom > 0, denom, 1))[..., :s]
    out = jnp.einsum("bhs,bshd->bhd", p, v, precision=precision)
    return out if squeeze else out[:, None]


reference = ragged_decode_attention_reference
