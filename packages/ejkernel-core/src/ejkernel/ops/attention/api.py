"""The public function ``attention``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from ...types.mask_info import MaskInfo
from ..executor import define
from .op import Attention

__all__ = ["attention"]


@define(Attention)
def attention(
    query: Float[Array, "batch seq_q num_heads head_dim"],
    key: Float[Array, "batch seq_k num_kv_heads head_dim"],
    value: Float[Array, "batch seq_k num_kv_heads value_head_dim"],
    bias: Float[Array, "..."] | None = None,
    dropout_rng: Any = None,
    softmax_aux: Float[Array, "num_heads"] | Float[Array, "num_heads num_sinks"] | None = None,
    *,
    mask_info: MaskInfo | None = None,
    init_bias: Callable[[], Any] | None = None,
    deterministic: bool = True,
    softmax_scale: float | None = None,
    logits_soft_cap: float | None = None,
    dtype: Any = jnp.bfloat16,
    softmax_dtype: Any = None,
    dropout_prob: float = 0.0,
    causal: bool = False,
    sliding_window: int | tuple[int, int] | None = None,
    dropout_seed: int | Int[Array, ""] | None = None,
    attention_mask: Bool[Array, "..."] | Int[Array, "..."] | None = None,
) -> tuple[Float[Array, "batch seq_q num_heads value_head_dim"], Float[Array, "batch num_heads seq_q seq_k"]]:
    """Plain multi-head attention that also returns the attention weights (materialized logits).

    Same masking semantics as :func:`ejkernel.flash_attention` (causal aligned bottom-right,
    windows, soft cap, bias, MaskInfo segments and masks, sinks, GQA); memory is quadratic in
    the sequence length. Use it where the weights themselves are needed (inspection,
    distillation); otherwise :func:`ejkernel.flash_attention` is faster and leaner.

    Args:
        query, key, value: ``[batch, seq, heads, dim]``; ``key``/``value`` may have fewer heads (GQA).
        bias: additive bias broadcastable to ``[batch, heads, seq_q, seq_k]``.
        dropout_rng: the dropout randomness: a ``jax.random`` key (or an integer seed).
        softmax_aux: attention-sink logits ``[num_heads]``, ``[num_heads, num_sinks]`` or ``[num_sinks]``.
        mask_info: a :class:`~ejkernel.types.MaskInfo` (segments, masks, causal, window).
        init_bias: a callable returning ``bias`` (instead of ``bias``).
        deterministic: ``True`` (default) disables dropout, as in earlier releases; dropout runs
            when ``deterministic=False`` and ``dropout_prob > 0``.
        softmax_scale: logits scale, default ``1/sqrt(head_dim)``.
        logits_soft_cap: ``cap · tanh(logits / cap)``.
        dtype: dtype of the returned weights and output (default bfloat16, as earlier releases);
            the weights are cast to it before they multiply ``value``.
        softmax_dtype: ``None`` or float32 (the softmax is always computed in float32).
        dropout_prob, causal, sliding_window: as in :func:`ejkernel.flash_attention`.
        dropout_seed: an explicit dropout seed (alternative to ``dropout_rng``).
        attention_mask: earlier releases' mask (``True``/nonzero = may attend):
            ``[batch, heads, seq_q, seq_k]`` (heads: the query heads, the key/value heads, or
            1), ``[batch, seq_q, seq_k]``, or ``[batch, seq_k]`` (a key mask shared by every
            query). It applies together with ``bias``, ``causal`` and the window (earlier
            releases ignored it when ``bias`` was given). Instead of ``mask_info``.

    Returns:
        ``(output [batch, seq_q, heads, value_dim], weights [batch, heads, seq_q, seq_k])``;
        weights of fully masked rows are zero, and after dropout they are the dropped,
        rescaled weights the output used.

    Example:
        >>> import jax, ejkernel
        >>> q = k = v = jax.random.normal(jax.random.key(0), (1, 16, 4, 32))
        >>> out, w = ejkernel.attention(q, k, v, causal=True)
        >>> out.shape, w.shape
        ((1, 16, 4, 32), (1, 4, 16, 16))
    """
