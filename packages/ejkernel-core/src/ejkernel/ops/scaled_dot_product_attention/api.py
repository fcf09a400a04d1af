"""The public function ``scaled_dot_product_attention``."""

from __future__ import annotations

import inspect

from jaxtyping import Array, Bool, Int

from ..executor import define
from ..families.attention import dense_attention_signature
from .op import ScaledDotProductAttention

__all__ = ["scaled_dot_product_attention"]


def _signature() -> None:
    """``flash_attention``'s parameters, with earlier releases' ``cum_seqlens_q/k`` (per-example
    lengths), packed boundaries as ``cu_seqlens_q/k``, and earlier releases' ``attention_mask=``."""


_dense = inspect.signature(dense_attention_signature)
_lengths = Int[Array, "batch"] | None
_boundaries = Int[Array, "num_seqs_plus_1"] | None
_signature.__signature__ = _dense.replace(  # type: ignore[attr-defined]
    parameters=[
        *(
            p.replace(annotation=_lengths) if p.name in ("cum_seqlens_q", "cum_seqlens_k") else p
            for p in _dense.parameters.values()
        ),
        inspect.Parameter("cu_seqlens_q", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=_boundaries),
        inspect.Parameter("cu_seqlens_k", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=_boundaries),
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

    The arguments and semantics of :func:`ejkernel.flash_attention` (masks, causal alignment,
    windows, soft cap, bias, dropout, sinks, GQA, ``mesh``), except for variable lengths, where it
    keeps the meaning earlier releases gave it (those passed the lengths on to
    ``jax.nn.dot_product_attention``):

    - ``cum_seqlens_q``, ``cum_seqlens_k`` (5th and 6th positional arrays): **per-example
      lengths** ``[batch]`` (``query_seq_lengths`` / ``key_value_seq_lengths`` of
      ``jax.nn.dot_product_attention``): query row ``i`` of example ``b`` is real iff
      ``i < cum_seqlens_q[b]``, key ``j`` iff ``j < cum_seqlens_k[b]``; either may be given
      alone. Rows past the length are zeros, and so is a real row whose example has no key
      (``jax.nn.dot_product_attention`` returns the mean of all values there).
    - ``cu_seqlens_q``, ``cu_seqlens_k`` (keyword only): **packed sequence boundaries**
      ``[num_seqs + 1]`` over one row of packed tokens (batch 1), as ``flash_attention``'s
      ``cum_seqlens_q/k``.

    The meaning is told by the name, never by the shape. Memory is quadratic in the sequence
    length, and gradients come from JAX's autodiff. Use it as the simple baseline, or for short
    sequences.

    ``attention_mask`` (earlier releases' keyword; True/nonzero = attend) is
    ``mask_info=MaskInfo.from_attention_mask(attention_mask)``: a ``[batch, seq]`` padding mask,
    or a pairwise ``[batch, seq_q, seq_k]`` / ``[batch, heads or 1, seq_q, seq_k]`` mask.

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> q = k = v = jax.random.normal(jax.random.key(0), (2, 16, 4, 32))
        >>> ejkernel.scaled_dot_product_attention(q, k, v, causal=True).shape
        (2, 16, 4, 32)
        >>> lens = jnp.array([16, 9])  # example 1 has 9 real tokens
        >>> out = ejkernel.scaled_dot_product_attention(q, k, v, None, lens, lens, causal=True)
        >>> bool((out[1, 9:] == 0).all())
        True
    """
