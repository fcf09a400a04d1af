"""``blocksparse_attention``: softmax attention over the tiles a block-sparse mask leaves visible
(causal, local, chunked, documents, arbitrary block masks and their intersection), BHSD layout."""

from .api import blocksparse_attention
from .mask import (
    BlockLayout,
    SparseMask,
    StaticBlocks,
    block_layout,
    block_mask,
    causal_mask,
    chunked_mask,
    compile_static,
    full_mask,
    local_mask,
    token_mask,
)
from .op import BlockSparseAttention, BlockSparseAttentionArgs, BlockSparseAttentionConfig

__all__ = [
    "BlockLayout",
    "BlockSparseAttention",
    "BlockSparseAttentionArgs",
    "BlockSparseAttentionConfig",
    "SparseMask",
    "StaticBlocks",
    "block_layout",
    "block_mask",
    "blocksparse_attention",
    "causal_mask",
    "chunked_mask",
    "compile_static",
    "full_mask",
    "local_mask",
    "token_mask",
]
