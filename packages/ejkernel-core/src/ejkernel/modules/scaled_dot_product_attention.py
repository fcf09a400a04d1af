"""``scaled_dot_product_attention``: the plain baseline (materializes the logits)."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from jaxtyping import Array, Float, Int

from ..ops.config import OpConfig
from ..types.mask_info import MaskInfo
from .attention import DenseAttentionOp

__all__ = ["ScaledDotProductAttention", "ScaledDotProductAttentionConfig", "scaled_dot_product_attention"]


@dataclasses.dataclass(frozen=True)
class ScaledDotProductAttentionConfig(OpConfig):
    """Config of ``scaled_dot_product_attention`` (it has nothing to tune: only the platform)."""

    op_name = "scaled_dot_product_attention"


class ScaledDotProductAttention(DenseAttentionOp):
    """The ``scaled_dot_product_attention`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    op_name = "scaled_dot_product_attention"
    version = "1"
    config_cls = ScaledDotProductAttentionConfig


@ScaledDotProductAttention.define
def scaled_dot_product_attention(
    query: Float[Array, "batch seq_q num_heads head_dim"],
    key: Float[Array, "batch seq_k num_kv_heads head_dim"],
    value: Float[Array, "batch seq_k num_kv_heads value_head_dim"],
    bias: Float[Array, "..."] | None = None,
    *,
    mask_info: MaskInfo | None = None,
    causal: bool = False,
    softmax_scale: float | None = None,
    sliding_window: int | tuple[int, int] | None = None,
    logits_soft_cap: float | None = None,
    dropout_prob: float = 0.0,
    dropout_seed: int | Int[Array, ""] | None = None,
    cum_seqlens_q: Int[Array, "num_seqs_plus_1"] | None = None,
    cum_seqlens_k: Int[Array, "num_seqs_plus_1"] | None = None,
    softmax_aux: Float[Array, "num_heads"] | Float[Array, "num_heads num_sinks"] | None = None,
    platform: Literal["auto", "xla", "triton", "pallas", "cuda"] | str | None = None,
    cfg: ScaledDotProductAttentionConfig | None = None,
    mesh: Any = None,
    in_specs: Any = None,
    out_specs: Any = None,
) -> Float[Array, "batch seq_q num_heads value_head_dim"]:
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
    return ScaledDotProductAttention.call(locals())
