"""Cached tokens per step of the XLA prefill scan: pure functions of the shapes."""

from __future__ import annotations

from ejkernel.ops.prefill_page_attention import PrefillPageAttentionArgs, PrefillPageAttentionConfig

# A step holds chunk × block (query, cached token) pairs of logits per head: aim at 2^16, between
# one page and 2048 cached tokens (the block of keys, shared by the rows, stays small).
PAIRS = 1 << 16
MAX_TOKENS = 2048
CANDIDATE_PAIRS = (1 << 14, 1 << 15, 1 << 16, 1 << 17, 1 << 18)


def _block_k(args: PrefillPageAttentionArgs, pairs: int) -> int:
    tokens = min(MAX_TOKENS, max(1, pairs // max(1, args.chunk_size)))
    return max(1, min(args.num_pages, tokens // args.page_size)) * args.page_size


def heuristic(args: PrefillPageAttentionArgs) -> PrefillPageAttentionConfig:
    return PrefillPageAttentionConfig(block_k=_block_k(args, PAIRS))


def candidates(args: PrefillPageAttentionArgs) -> list[PrefillPageAttentionConfig]:
    return [PrefillPageAttentionConfig(block_k=b) for b in sorted({_block_k(args, p) for p in CANDIDATE_PAIRS})]


def pages_per_step(cfg: PrefillPageAttentionConfig, args: PrefillPageAttentionArgs) -> int:
    """Whole pages per step: ``block_k`` rounded down to pages, at least one."""
    assert cfg.block_k is not None
    return max(1, cfg.block_k // args.page_size)
