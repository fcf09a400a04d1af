"""The public function ``scaled_dot_product_attention``."""

from __future__ import annotations

import inspect

from jaxtyping import Array, Bool, Int

from ..executor import define
from ..families.attention import dense_attention_signature
from .op import ScaledDotProductAttention

__all__ = ["scaled_dot_product_attention"]


def _signature() -> None:
    """``flash_attention``'s parameters plus earlier releases' ``attention_mask=``."""


_dense = inspect.signature(dense_attention_signature)
_signature.__signature__ = _dense.replace(  # type: ignore[attr-defined]
    parameters=[
        *_dense.parameters.values(),
        inspect.Parameter(
            "attention_mask",
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=Bool[Array, "..."] | Int[Array, "..."] | None,
        ),
    ]
)


@define(ScaledDotProductAttention, signature=_signature)
def scaled_dot_product_attention():
    """Softmax attention that materializes the ``[batch, heads, seq_q, seq_k]`` logits.

    Same arguments and semantics as :func:`ejkernel.flash_attention` (masks, causal alignment,
    windows, soft cap, bias, dropout, varlen, sinks, GQA, ``mesh``); memory is quadratic in the
    sequence length, and gradients come from JAX's autodiff. Use it as the simple baseline, or for
    short sequences.

    ``attention_mask`` (earlier releases' keyword; True/nonzero = attend) is
    ``mask_info=MaskInfo.from_attention_mask(attention_mask)``: a ``[batch, seq]`` padding mask,
    or a pairwise ``[batch, seq_q, seq_k]`` / ``[batch, heads or 1, seq_q, seq_k]`` mask.

    Example:
        >>> import jax, ejkernel
        >>> q = k = v = jax.random.normal(jax.random.key(0), (1, 16, 4, 32))
        >>> ejkernel.scaled_dot_product_attention(q, k, v, causal=True).shape
        (1, 16, 4, 32)
    """
