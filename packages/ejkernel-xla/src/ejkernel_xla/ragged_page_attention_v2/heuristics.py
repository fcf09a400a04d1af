"""Query tokens per block and pages per step of the XLA ``ragged_page_attention_v2`` scan: pure
functions of the shapes."""

from __future__ import annotations

from ejkernel.ops.families.serving import MAX_QUERY_BLOCK, query_block_size, query_slots
from ejkernel.ops.ragged_page_attention_v2 import RaggedPageAttentionv2Args, RaggedPageAttentionv2Config

# A step holds (query slot, cached token) logits for every block of queries: aim at 2^16 pairs per
# step, between one page and 2048 cached tokens.
PAIRS = 1 << 16
MAX_TOKENS = 2048
CANDIDATE_PAIRS = (1 << 14, 1 << 15, 1 << 16, 1 << 17, 1 << 18)


def _pages(args: RaggedPageAttentionv2Args, pairs: int, block_q: int) -> int:
    rows = query_slots(args.total_tokens, args.max_num_seqs, block_q)
    tokens = min(MAX_TOKENS, max(1, pairs // max(1, rows)))
    return max(1, min(args.pages_per_seq, tokens // args.page_size))


def heuristic(args: RaggedPageAttentionv2Args) -> RaggedPageAttentionv2Config:
    bq = query_block_size(args.total_tokens, args.max_num_seqs)
    return RaggedPageAttentionv2Config(num_kv_pages_per_block=_pages(args, PAIRS, bq), num_queries_per_block=bq)


def candidates(args: RaggedPageAttentionv2Args) -> list[RaggedPageAttentionv2Config]:
    bq = query_block_size(args.total_tokens, args.max_num_seqs)
    blocks = sorted({1, bq, min(2 * bq, MAX_QUERY_BLOCK)})
    sizes = sorted({(_pages(args, p, b), b) for p in CANDIDATE_PAIRS for b in blocks})
    return [RaggedPageAttentionv2Config(num_kv_pages_per_block=n, num_queries_per_block=b) for n, b in sizes]
