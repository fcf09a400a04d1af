"""The reference of ``ragged_decode_attention``: dense masked attention over the whole cache
(float32 at HIGHEST precision by default): every logit ``[batch, heads, kv_len]`` at once, the
keys outside ``[start, end)`` (and the window) masked."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..families.serving import masked_attention_reference, sinks_per_head
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
    q = query if squeeze else query[:, 0]
    t = jnp.arange(key.shape[1])[None, :]
    start, end = jnp.asarray(sequence_start)[:, None], jnp.asarray(sequence_end)[:, None]
    valid = (t >= start) & (t < end)  # [b, s]
    if sliding_window is not None:
        left = sliding_window if isinstance(sliding_window, int) else sliding_window[0]
        valid &= t >= end - 1 - left
    out = masked_attention_reference(
        q[:, None],
        key,
        value,
        valid[:, None],
        scale=softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5,
        soft_cap=logits_soft_cap,
        sinks=sinks_per_head(softmax_aux, q.shape[1]),
        dtype=dtype,
        precision=precision,
    )[:, 0]
    return out if squeeze else out[:, None]


reference = ragged_decode_attention_reference
