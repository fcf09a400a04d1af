"""``lightning_attention``: linear attention with a fixed per-head decay (Lightning Attention)."""

from .api import lightning_attention
from .op import LightningAttention, LightningAttentionConfig

__all__ = ["LightningAttention", "LightningAttentionConfig", "lightning_attention"]
