"""``flash_attention``: exact softmax attention, blockwise (FlashAttention-2), linear memory."""

from .api import flash_attention
from .op import FlashAttention, FlashAttentionConfig

__all__ = ["FlashAttention", "FlashAttentionConfig", "flash_attention"]
