"""The ``scaled_dot_product_attention`` op: the plain baseline (materializes the logits)."""

from __future__ import annotations

import dataclasses

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
