"""``ragged_page_attention_v2``: mixed prefill and decode of packed query tokens over a K/V-interleaved
paged cache (continuous batching)."""

from .api import ragged_page_attention_v2
from .op import RaggedPageAttentionv2, RaggedPageAttentionv2Args, RaggedPageAttentionv2Config

__all__ = [
    "RaggedPageAttentionv2",
    "RaggedPageAttentionv2Args",
    "RaggedPageAttentionv2Config",
    "ragged_page_attention_v2",
]
