"""The reference of ``recurrent_attention``: the naive recurrence, token by token (float32)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..families.linear_attention import HIGHEST, linear_recurrence_reference
from ..gla_attention.reference import key_gate

__all__ = ["recurrent_attention_reference", "reference"]


def recurrent_attention_reference(
    query: Any,
    key: Any,
    value: Any,
    g: Any = None,
    g_gamma: Any = None,
    gk: Any = None,
    gv: Any = None,
    initial_state: Any = None,
    cu_seqlens: Any = None,
    *,
    softmax_scale: float | None = None,
    reverse: bool = False,
    return_state: bool = False,
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
) -> Any:
    a = key_gate(g, g_gamma, query.shape)
    if gk is not None:
        a = gk.astype(jnp.float32) if a is None else a + gk.astype(jnp.float32)
    return linear_recurrence_reference(
        query,
        key,
        value,
        gk=a,
        gv=gv,
        initial_state=initial_state,
        cu_seqlens=cu_seqlens,
        softmax_scale=softmax_scale,
        reverse=reverse,
        return_state=return_state,
        dtype=dtype,
        precision=precision,
    )


reference = recurrent_attention_reference
