"""``ragged_page_attention_v3``: one serving step that writes the new keys and values of packed
query tokens into a packed, K/V-interleaved paged cache and attends it (continuous batching)."""

from .api import ragged_page_attention_v3
from .kv_cache import (
    ragged_page_attention_v3_cache_shape,
    ragged_page_attention_v3_pack_cache,
    ragged_page_attention_v3_unpack_cache,
)
from .op import RaggedPageAttentionv3, RaggedPageAttentionv3Args, RaggedPageAttentionv3Config

__all__ = [
    "RaggedPageAttentionv3",
    "RaggedPageAttentionv3Args",
    "RaggedPageAttentionv3Config",
    "ragged_page_attention_v3",
    "ragged_page_attention_v3_cache_shape",
    "ragged_page_attention_v3_pack_cache",
    "ragged_page_attention_v3_unpack_cache",
]
