"""``ragged_decode_attention``: one decode step (a token per sequence) over a contiguous KV cache,
each sequence attending its own ``[sequence_start, sequence_end)`` range."""

from .api import ragged_decode_attention
from .op import RaggedDecodeAttention, RaggedDecodeAttentionArgs, RaggedDecodeAttentionConfig

__all__ = [
    "RaggedDecodeAttention",
    "RaggedDecodeAttentionArgs",
    "RaggedDecodeAttentionConfig",
    "ragged_decode_attention",
]
