"""The ops: a function and a Module (+ Config) class each.

``flash_attention(q, k, v, ...)`` is the function form; ``FlashAttention`` is the same op as a
module for an :class:`~ejkernel.ops.Executor` (``executor(FlashAttention(), q, k, v, ...)``),
configured by ``FlashAttentionConfig``.
"""

from ..ops.executor import Executor, create_default_executor
from .attention import AttentionArgs, DenseAttentionOp, dropout_keep_mask, key_bounds
from .flash_attention import FlashAttention, FlashAttentionConfig, flash_attention
from .page_attention import PageAttention, PageAttentionArgs, PageAttentionConfig, page_attention
from .ring_attention import (
    RingAttention,
    RingAttentionArgs,
    RingAttentionConfig,
    ring_attention,
    zigzag_permute,
    zigzag_unpermute,
)
from .scaled_dot_product_attention import (
    ScaledDotProductAttention,
    ScaledDotProductAttentionConfig,
    scaled_dot_product_attention,
)

__all__ = [
    "AttentionArgs",
    "DenseAttentionOp",
    "Executor",
    "FlashAttention",
    "FlashAttentionConfig",
    "PageAttention",
    "PageAttentionArgs",
    "PageAttentionConfig",
    "RingAttention",
    "RingAttentionArgs",
    "RingAttentionConfig",
    "ScaledDotProductAttention",
    "ScaledDotProductAttentionConfig",
    "create_default_executor",
    "dropout_keep_mask",
    "flash_attention",
    "key_bounds",
    "page_attention",
    "ring_attention",
    "scaled_dot_product_attention",
    "zigzag_permute",
    "zigzag_unpermute",
]
