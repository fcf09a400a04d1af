"""``recurrent_attention``: the general gated linear-attention recurrence (key and value gates)."""

from .api import recurrent_attention
from .op import RecurrentAttention, RecurrentAttentionConfig

__all__ = ["RecurrentAttention", "RecurrentAttentionConfig", "recurrent_attention"]
