"""``native_sparse_attention``: NSA's compressed, selected and sliding-window branches, gated."""

from .api import apply_native_sparse_attention, native_sparse_attention
from .op import NativeSparseAttention, NativeSparseAttentionArgs, NativeSparseAttentionConfig

__all__ = [
    "NativeSparseAttention",
    "NativeSparseAttentionArgs",
    "NativeSparseAttentionConfig",
    "apply_native_sparse_attention",
    "native_sparse_attention",
]
