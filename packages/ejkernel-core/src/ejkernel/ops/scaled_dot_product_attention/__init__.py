"""``scaled_dot_product_attention``: softmax attention that materializes the logits (the baseline)."""

from .api import scaled_dot_product_attention
from .op import ScaledDotProductAttention, ScaledDotProductAttentionConfig

__all__ = ["ScaledDotProductAttention", "ScaledDotProductAttentionConfig", "scaled_dot_product_attention"]
