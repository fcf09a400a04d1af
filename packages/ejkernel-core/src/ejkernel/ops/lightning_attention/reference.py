"""The reference of ``lightning_attention``: the naive recurrence with the per-head decay."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..families.linear_attention import HIGHEST, lightning_decay, linear_recurrence_reference
from ..gla_attention.reference import key_gate

__all__ = ["lightning_attention_reference", "reference"]


def lightning_attention_reference(
    query: Any,
    key: Any,
    value: Any,
    initial_state: Any = None,
    cu_seqlens: Any = None,
    *,
    layer_idx: int | None = None,
    num_layers: int | None = None,
    softmax_scale: float | None = None,
    reverse: bool = False,
    return_state: bool = False,
    decay: Any = None,
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
) -> Any:
    if decay is not None:  # explicit per-head decay rates: the log decay is -decay
        gamma = -jnp.asarray(decay).astype(jnp.float32)
    else:
        gamma = jnp.asarray(lightning_decay(query.shape[2], layer_idx, num_layers))
    return linear_recurrence_reference(
        query,
        key,
        value,
        gk=key_gate(None, gamma, query.shape),
        initial_state=initial_state,
        cu_seqlens=cu_seqlens,
        softmax_scale=softmax_scale,
        reverse=reverse,
        return_state=return_state,
        dtype=dtype,
        precision=precision,
    )


reference = lightning_attention_reference
