"""Cached tokens per step and query tokens per block of the XLA unified attention scan: the serving
family's rule (:func:`ejkernel.ops.families.serving.ragged_scan_configs`) on this op's shapes."""

from __future__ import annotations

from ejkernel.ops.families.serving import query_block_size, ragged_scan_configs
from ejkernel.ops.unified_attention import UnifiedAttentionArgs, UnifiedAttentionConfig


def configs(args: UnifiedAttentionArgs, platform: str) -> tuple[UnifiedAttentionConfig, list[UnifiedAttentionConfig]]:
    """The heuristic's config on ``platform`` and the candidates of autotuning: the pages of the
    rule's candidates at the heuristic's query block (the config has no field for it)."""
    bq = block_q(args)
    (pages, _), tiles = ragged_scan_configs(
        args, platform, lambda n, b: (n, b),
        max_seqs=args.num_seqs, page_size=args.block_size, max_pages=args.max_blocks_per_seq,
    )  # fmt: skip
    blocks = sorted({n for n, b in tiles if b == bq})
    return UnifiedAttentionConfig(block_dim=pages * args.block_size), [
        UnifiedAttentionConfig(block_dim=n * args.block_size) for n in blocks
    ]


def pages_per_step(cfg: UnifiedAttentionConfig, args: UnifiedAttentionArgs) -> int:
    """Whole blocks per step: ``block_dim`` rounded down to blocks, at least one."""
    assert cfg.block_dim is not None
    return max(1, cfg.block_dim // args.block_size)


def block_q(args: UnifiedAttentionArgs) -> int:
    """Query tokens per block of the scan (:func:`ejkernel.ops.families.serving.query_block_size`)."""
    return query_block_size(args.total_tokens, args.num_seqs)
