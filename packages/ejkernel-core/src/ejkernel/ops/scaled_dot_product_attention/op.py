"""The ``scaled_dot_product_attention`` op: the plain baseline (materializes the logits).

Its parameters are ``flash_attention``'s, except the two that earlier releases gave another
meaning (they passed them on to ``jax.nn.dot_product_attention``): ``cum_seqlens_q`` /
``cum_seqlens_k`` are per-example lengths ``[batch]`` here too, and packed sequence boundaries
``[num_seqs + 1]`` (``flash_attention``'s ``cum_seqlens_q/k``) are ``cu_seqlens_q`` /
``cu_seqlens_k``. The meaning is told by the name only, never by the shape (``batch + 1`` lengths
and ``num_seqs + 1`` boundaries can have the same length).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from ...types.mask_info import MaskInfo
from ..args import Args, as_array
from ..config import OpConfig
from ..families.attention import AttentionOp, lengths_mask_info

__all__ = ["ScaledDotProductAttention", "ScaledDotProductAttentionConfig"]


@dataclasses.dataclass(frozen=True)
class ScaledDotProductAttentionConfig(OpConfig):
    """Config of ``scaled_dot_product_attention`` (it has nothing to tune: only the platform)."""


class ScaledDotProductAttention(AttentionOp):
    """The ``scaled_dot_product_attention`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "scaled_dot_product_attention"
    version = "1"
    config_cls = ScaledDotProductAttentionConfig

    def bind(self, params: dict[str, Any]) -> Args:
        params = dict(params)
        q_lens, k_lens = params.pop("cum_seqlens_q", None), params.pop("cum_seqlens_k", None)
        # The dense attention record calls packed boundaries cum_seqlens_q/k.
        params["cum_seqlens_q"] = params.pop("cu_seqlens_q", None)
        params["cum_seqlens_k"] = params.pop("cu_seqlens_k", None)
        packed = params["cum_seqlens_q"] is not None or params["cum_seqlens_k"] is not None
        # Earlier releases' ``attention_mask=`` (api-modules.md): the MaskInfo it stands for.
        mask = params.pop("attention_mask", None)
        if mask is not None:
            if params.get("mask_info") is not None:
                raise ValueError(f"{self.name}: pass attention_mask or mask_info, not both")
            layout = "[batch, seq], [batch, seq_q, seq_k] or [batch, heads or 1, seq_q, seq_k]"
            mask = as_array(self.name, "attention_mask", mask, ndim=(2, 3, 4), layout=layout)
            if not (mask.dtype == jnp.bool_ or jnp.issubdtype(mask.dtype, jnp.integer)):
                raise TypeError(f"{self.name}: attention_mask must be a bool or integer array, got {mask.dtype}")
            params["mask_info"] = MaskInfo.from_attention_mask(mask)
        if q_lens is not None or k_lens is not None:
            if packed:
                raise ValueError(
                    f"{self.name}: pass per-example lengths (cum_seqlens_q/k, [batch]) or packed sequence "
                    "boundaries (cu_seqlens_q/k, [num_seqs + 1]), not both"
                )
            params["mask_info"] = lengths_mask_info(
                self.name, params.get("query"), params.get("key"), q_lens, k_lens, params.get("mask_info")
            )
        try:
            return super().bind(params)
        except (TypeError, ValueError) as e:
            if not packed or "cum_seqlens_" not in str(e):
                raise
            # The record's checks name its fields; this call named the boundaries cu_seqlens_q/k.
            raise type(e)(str(e).replace("cum_seqlens_", "cu_seqlens_")) from None
