"""The reference of ``deepseek_attn``: the kept-key mask of
:func:`~ejkernel.ops.families.latent_attention.index_mask` (which defines the selection), then
latent attention on materialized keys and values (``flash_mla``'s reference) under that mask."""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp

from ..families.latent_attention import index_mask
from ..flash_attention.reference import HIGHEST
from ..flash_mla.reference import latent_reference

__all__ = ["deepseek_attn_reference", "reference"]


def deepseek_attn_reference(
    query: Any,
    key_value: Any,
    w_kc: Any,
    w_vc: Any,
    query_index: Any,
    key_index: Any,
    index_weights: Any,
    index_topk: int = 2048,
    softmax_scale: float | None = None,
    index_softmax_scale: float | None = None,
    b_q: Any = None,
    b_k: Any = None,
    causal: bool = True,
    *,
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
) -> Any:
    """The reference of ``deepseek_attn`` (same arguments; ``dtype``/``precision``: the compute
    dtype and matmul precision of the attention; the selection is always float32)."""
    if index_softmax_scale is None:
        index_softmax_scale = 1.0 / math.sqrt(query_index.shape[-1])
    mask = index_mask(
        query_index, key_index, index_weights, topk=int(index_topk), scale=float(index_softmax_scale), causal=causal
    )
    return latent_reference(
        query,
        key_value,
        w_kc,
        w_vc,
        b_q,
        b_k,
        softmax_scale=softmax_scale,
        causal=causal,
        attention_mask=mask,
        dtype=dtype,
        precision=precision,
    )


reference = deepseek_attn_reference
