"""``gla_attention``: gated linear attention (GLA), chunked, memory linear in the sequence length."""

from .api import gla_attention
from .op import GLAttention, GLAttentionConfig

__all__ = ["GLAttention", "GLAttentionConfig", "gla_attention"]
