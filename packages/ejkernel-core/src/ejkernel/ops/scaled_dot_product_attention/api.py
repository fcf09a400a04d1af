"""The public function ``scaled_dot_product_attention``."""

from __future__ import annotations

from ..executor import define
from ..families.attention import dense_attention_signature
from .op import ScaledDotProductAttention

__all__ = ["scaled_dot_product_attention"]


@define(ScaledDotProductAttention, signature=dense_attention_signature)
def scaled_dot_product_attention():
    """Softmax attention that materializes the ``[batch, heads, seq_q, seq_k]`` logits.

    Same arguments and semantics as :func:`ejkernel.flash_attention` (masks, causal alignment,
    windows, soft cap, bias, dropout, varlen, sinks, GQA, ``mesh``); memory is quadratic in the
    sequence length, and gradients come from JAX's autodiff. Use it as the simple baseline, or for
    short sequences.

    Example:
        >>> import jax, ejkernel
        >>> q = k = v = jax.random.normal(jax.random.key(0), (1, 16, 4, 32))
        >>> ejkernel.scaled_dot_product_attention(q, k, v, causal=True).shape
        (1, 16, 4, 32)
    """
