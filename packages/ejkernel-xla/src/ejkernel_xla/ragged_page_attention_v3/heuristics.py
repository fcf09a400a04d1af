"""Pages per step of the XLA ``ragged_page_attention_v3`` scan: pure functions of the shapes."""

from __future__ import annotations

from ejkernel.ops.ragged_page_attention_v3 import RaggedPageAttentionv3Args, RaggedPageAttentionv3Config

# Every query row gathers its own block of pages, so a step holds tokens × block cached rows:
# aim at 2^16 (token, cached token) pairs per step, between one page and 2048 cached tokens.
PAIRS = 1 << 16
MAX_TOKENS = 2048
CANDIDATE_PAIRS = (1 << 14, 1 << 15, 1 << 16, 1 << 17, 1 << 18)


def _pages(args: RaggedPageAttentionv3Args, pairs: int) -> int:
    tokens = min(MAX_TOKENS, max(1, pairs // max(1, args.total_tokens)))
    return max(1, min(args.pages_per_seq, tokens // args.page_size))


def heuristic(args: RaggedPageAttentionv3Args) -> RaggedPageAttentionv3Config:
    return RaggedPageAttentionv3Config(num_kv_pages_per_block=_pages(args, PAIRS))


def candidates(args: RaggedPageAttentionv3Args) -> list[RaggedPageAttentionv3Config]:
    sizes = sorted({_pages(args, p) for p in CANDIDATE_PAIRS})
    return [RaggedPageAttentionv3Config(num_kv_pages_per_block=n) for n in sizes]
