"""``page_attention``: one decode step (a token per sequence) over a paged KV cache."""

from .api import page_attention
from .op import PageAttention, PageAttentionArgs, PageAttentionConfig

__all__ = ["PageAttention", "PageAttentionArgs", "PageAttentionConfig", "page_attention"]
