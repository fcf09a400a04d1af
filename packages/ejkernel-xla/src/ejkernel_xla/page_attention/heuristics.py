"""Tokens per step of the XLA paged decode: pure functions of the shapes."""

from __future__ import annotations

from ejkernel.ops.page_attention import PageAttentionArgs, PageAttentionConfig

# 2048 tokens per step: gathers large enough to run near copy bandwidth, while the gathered chunk
# stays a small fraction of a long context.
TOKENS = 2048
CANDIDATE_TOKENS = (256, 512, 1024, 2048, 4096, 8192)


def _whole_pages(args: PageAttentionArgs, tokens: int) -> int:
    full = args.max_blocks * args.block_size
    return min(full, max(args.block_size, tokens // args.block_size * args.block_size))


def heuristic(args: PageAttentionArgs) -> PageAttentionConfig:
    return PageAttentionConfig(tokens_per_block=_whole_pages(args, TOKENS), num_splits=1)


def candidates(args: PageAttentionArgs) -> list[PageAttentionConfig]:
    full = args.max_blocks * args.block_size
    sizes = sorted({_whole_pages(args, t) for t in (*CANDIDATE_TOKENS, full)})
    return [PageAttentionConfig(tokens_per_block=t, num_splits=1) for t in sizes]
