"""The reference of ``flash_mla``: the non-absorbed form. Keys and values are materialized per
head (``K = [c @ w_kc | k_rope]``, ``V = c @ w_vc``) and handed to the dense attention reference,
float32 at HIGHEST precision by default; the implementations compute the absorbed form, a
different association of the same products, so the two check each other."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..families.latent_attention import materialized_kv
from ..flash_attention.reference import HIGHEST, attention_reference

__all__ = ["flash_mla_reference", "latent_reference", "reference"]


def latent_reference(
    query: Any,
    key_value: Any,
    w_kc: Any,
    w_vc: Any,
    b_q: Any = None,
    b_k: Any = None,
    cu_seqlens: Any = None,
    *,
    softmax_scale: float | None = None,
    causal: bool = False,
    attention_mask: Any = None,
    bias: Any = None,
    softmax_aux: Any = None,
    logits_soft_cap: float | None = None,
    sliding_window: int | tuple[int, int] | None = None,
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
) -> Any:
    """Latent attention on materialized keys and values (the shared part of the references)."""
    q, k, v = materialized_kv(query, key_value, w_kc, w_vc, b_q, b_k, dtype=dtype, precision=precision)
    if softmax_scale is None:
        softmax_scale = float(q.shape[-1]) ** -0.5  # qk_nope_head_dim + qk_rope_head_dim
    h = q.shape[2]
    if softmax_aux is not None and softmax_aux.ndim == 1 and softmax_aux.shape[0] != h:
        softmax_aux = jnp.broadcast_to(softmax_aux[None, :], (h, softmax_aux.shape[0]))  # shared sinks
    if attention_mask is not None:  # as a bias: -inf where masked (a row with nothing left gives zeros)
        masked = jnp.where(jnp.asarray(attention_mask) != 0, 0.0, -jnp.inf).astype(dtype)
        bias = masked if bias is None else bias.astype(dtype) + masked
    return attention_reference(
        q,
        k,
        v,
        bias,
        causal=causal,
        softmax_scale=softmax_scale,
        sliding_window=sliding_window,
        logits_soft_cap=logits_soft_cap,
        cum_seqlens_q=cu_seqlens,
        softmax_aux=softmax_aux,
        dtype=dtype,
        precision=precision,
    )


def flash_mla_reference(
    query: Any,
    key_value: Any,
    w_kc: Any,
    w_vc: Any,
    b_q: Any = None,
    b_k: Any = None,
    cu_seqlens: Any = None,
    *,
    softmax_scale: float | None = None,
    causal: bool = False,
    attention_mask: Any = None,
    bias: Any = None,
    softmax_aux: Any = None,
    logits_soft_cap: float | None = None,
    deterministic: bool = True,
    dropout_rng: Any = None,
    dropout_prob: float = 0.0,
    sliding_window: int | tuple[int, int] | None = None,
    softmax_dtype: Any = None,
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
) -> Any:
    """The reference of ``flash_mla`` (same arguments; ``dtype``/``precision``: the compute dtype
    and matmul precision). Dropout is not part of the op (it refuses it), so not of this."""
    if dropout_prob > 0 and not deterministic:
        raise ValueError("flash_mla_reference: attention dropout is not supported")
    return latent_reference(
        query,
        key_value,
        w_kc,
        w_vc,
        b_q,
        b_k,
        cu_seqlens,
        softmax_scale=softmax_scale,
        causal=causal,
        attention_mask=attention_mask,
        bias=bias,
        softmax_aux=softmax_aux,
        logits_soft_cap=logits_soft_cap,
        sliding_window=sliding_window,
        dtype=dtype,
        precision=precision,
    )


reference = flash_mla_reference
