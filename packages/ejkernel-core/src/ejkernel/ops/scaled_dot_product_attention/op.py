"""The ``scaled_dot_product_attention`` op: the plain baseline (materializes the logits)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from ...types.mask_info import MaskInfo
from ..args import Args, as_array
from ..config import OpConfig
from ..families.attention import AttentionOp

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
        # Earlier releases' ``attention_mask=`` (api-modules.md): the MaskInfo it stands for.
        params = dict(params)
        mask = params.pop("attention_mask", None)
        if mask is not None:
            if params.get("mask_info") is not None:
                raise ValueError(f"{self.name}: pass attention_mask or mask_info, not both")
            layout = "[batch, seq], [batch, seq_q, seq_k] or [batch, heads or 1, seq_q, seq_k]"
            mask = as_array(self.name, "attention_mask", mask, ndim=(2, 3, 4), layout=layout)
            if not (mask.dtype == jnp.bool_ or jnp.issubdtype(mask.dtype, jnp.integer)):
                raise TypeError(f"{self.name}: attention_mask must be a bool or integer array, got {mask.dtype}")
            params["mask_info"] = MaskInfo.from_attention_mask(mask)
        return super().bind(params)
