"""The reference of ``attention``: the dense attention reference, with the weights."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..flash_attention.reference import HIGHEST, attention_reference
from .op import dropout_seed_of

__all__ = ["reference"]


def reference(
    query: Any,
    key: Any,
    value: Any,
    bias: Any = None,
    dropout_rng: Any = None,
    softmax_aux: Any = None,
    *,
    mask_info: Any = None,
    init_bias: Any = None,
    deterministic: bool = True,
    softmax_scale: float | None = None,
    logits_soft_cap: float | None = None,
    softmax_dtype: Any = None,
    dropout_prob: float = 0.0,
    causal: bool = False,
    sliding_window: Any = None,
    dropout_seed: Any = None,
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
) -> tuple[Any, Any]:
    """``(output, weights)`` in float32 (``dtype`` is the compute dtype here, as for every reference)."""
    if init_bias is not None:
        bias = init_bias()
    if deterministic:
        dropout_prob = 0.0
    elif dropout_rng is not None:
        dropout_seed = dropout_seed_of("attention", dropout_rng)
    return attention_reference(
        query,
        key,
        value,
        bias,
        mask_info=mask_info,
        causal=causal,
        softmax_scale=softmax_scale,
        sliding_window=sliding_window,
        logits_soft_cap=logits_soft_cap,
        dropout_prob=dropout_prob,
        dropout_seed=dropout_seed,
        softmax_aux=softmax_aux,
        dtype=dtype,
        precision=precision,
        return_weights=True,
    )
