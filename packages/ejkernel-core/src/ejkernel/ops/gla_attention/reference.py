"""The reference of ``gla_attention``: the naive recurrence, token by token (float32)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..families.linear_attention import HIGHEST, linear_recurrence_reference

__all__ = ["gla_attention_reference", "reference"]


def key_gate(g: Any, g_gamma: Any, shape: tuple[int, ...]) -> Any:
    """``g + g_gamma`` as one ``[b, t, h, dk]`` float32 log gate (``None`` when neither)."""
    if g is None and g_gamma is None:
        return None
    out = jnp.zeros(shape, jnp.float32)
    if g is not None:
        out = out + g.astype(jnp.float32)
    if g_gamma is not None:
        out = out + g_gamma.astype(jnp.float32)[None, None, :, None]
    return out


def gla_attention_reference(
    query: Any,
    key: Any,
    value: Any,
    g: Any = None,
    g_gamma: Any = None,
    initial_state: Any = None,
    cu_seqlens: Any = None,
    *,
    softmax_scale: float | None = None,
    reverse: bool = False,
    return_state: bool = False,
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
) -> Any:
    return linear_recurrence_reference(
        query,
        key,
        value,
        gk=key_gate(g, g_gamma, query.shape),
        initial_state=initial_state,
        cu_seqlens=cu_seqlens,
        softmax_scale=softmax_scale,
        reverse=reverse,
        return_state=return_state,
        dtype=dtype,
        precision=precision,
    )


reference = gla_attention_reference
