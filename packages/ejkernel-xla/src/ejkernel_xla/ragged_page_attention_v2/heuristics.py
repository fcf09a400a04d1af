"""Pages per step of the XLA ragged paged attention scan: pure functions of the shapes."""

from __future__ import annotations

from ejkernel.ops.ragged_page_attention_v2 import RaggedPageAttentionv2Args, RaggedPageAttentionv2Config

# Every query row gathers its own block of pages, so a step holds tokens × block cached rows:
# aim at 2^16 (token, cached token) pairs per step, between one page and 2048 cached tokens.
PAIRS = 1 << 16
MAX_TOKENS = 2048
CANDIDATE_PAIRS = (1 << 14, 1 << 15, 1 << 16, 1 << 17, 1 << 18)


def _pages(args: RaggedPageAttentionv2Args, pairs: int) -> int:
    tokens = min(MAX_TOKENS, max(1, pairs // max(1, args.total_tokens)))
    return max(1, min(args.pages_per_seq, tokens // args.page_size))


def heuristic(args: RaggedPageAttentionv2Args) -> RaggedPageAttentionv2Config:
    return RaggedPageAttentionv2Config(num_kv_pages_per_block=_pages(args, PAIRS))


def candidates(args: RaggedPageAttentionv2Args) -> list[RaggedPageAttentionv2Config]:
    sizes = sorted({_pages(args, p) for p in CANDIDATE_PAIRS})
    return [RaggedPageAttentionv2Config(num_kv_pages_per_block=n) for n in sizes]
