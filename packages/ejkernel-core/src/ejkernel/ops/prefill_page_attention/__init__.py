"""``prefill_page_attention``: one sequence's chunk of new queries over its pages of a paged cache
whose kv heads come first (JetStream layout)."""

from .api import prefill_page_attention
from .op import PrefillPageAttention, PrefillPageAttentionArgs, PrefillPageAttentionConfig

__all__ = [
    "PrefillPageAttention",
    "PrefillPageAttentionArgs",
    "PrefillPageAttentionConfig",
    "prefill_page_attention",
]
