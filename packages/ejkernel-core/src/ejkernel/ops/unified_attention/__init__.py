"""``unified_attention``: vLLM's unified attention: mixed prefill and decode of packed query tokens
over a paged cache of separate keys and values, with ALiBi, a query-query bias and sinks."""

from .api import unified_attention
from .op import UnifiedAttention, UnifiedAttentionArgs, UnifiedAttentionConfig

__all__ = [
    "UnifiedAttention",
    "UnifiedAttentionArgs",
    "UnifiedAttentionConfig",
    "unified_attention",
]
