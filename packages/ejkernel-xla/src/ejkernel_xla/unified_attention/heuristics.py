"""Cached tokens per step and query tokens per block of the XLA unified attention scan: pure
functions of the shapes."""

from __future__ import annotations

from ejkernel.ops.families.serving import query_block_size, query_slots
from ejkernel.ops.unified_attention import UnifiedAttentionArgs, UnifiedAttentionConfig

# A step holds (query slot, cached token) logits for every block of queries: aim at 2^16 pairs per
# step, between one page and 2048 cached tokens.
PAIRS = 1 << 16
MAX_TOKENS = 2048
CANDIDATE_PAIRS = (1 << 14, 1 << 15, 1 << 16, 1 << 17, 1 << 18)


def _block_dim(args: UnifiedAttentionArgs, pairs: int) -> int:
    rows = query_slots(args.total_tokens, args.num_seqs, block_q(args))
    tokens = min(MAX_TOKENS, max(1, pairs // max(1, rows)))
    return max(1, min(args.max_blocks_per_seq, tokens // args.block_size)) * args.block_size


def heuristic(args: UnifiedAttentionArgs) -> UnifiedAttentionConfig:
    return UnifiedAttentionConfig(block_dim=_block_dim(args, PAIRS))


def candidates(args: UnifiedAttentionArgs) -> list[UnifiedAttentionConfig]:
    return [UnifiedAttentionConfig(block_dim=b) for b in sorted({_block_dim(args, p) for p in CANDIDATE_PAIRS})]


def pages_per_step(cfg: UnifiedAttentionConfig, args: UnifiedAttentionArgs) -> int:
    """Whole blocks per step: ``block_dim`` rounded down to blocks, at least one."""
    assert cfg.block_dim is not None
    return max(1, cfg.block_dim // args.block_size)


def block_q(args: UnifiedAttentionArgs) -> int:
    """Query tokens per block of the scan (:func:`ejkernel.ops.families.serving.query_block_size`)."""
    return query_block_size(args.total_tokens, args.num_seqs)
