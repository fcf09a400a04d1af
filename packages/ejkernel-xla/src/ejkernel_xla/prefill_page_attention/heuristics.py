"""Cached tokens per step of the XLA prefill scan: the serving family's rule
(:func:`ejkernel.ops.families.serving.scan_pages`) for one row of ``chunk_size`` query slots."""

from __future__ import annotations

import jax.numpy as jnp

from ejkernel.ops.families.serving import scan_pages, scan_pair_candidates
from ejkernel.ops.prefill_page_attention import PrefillPageAttentionArgs, PrefillPageAttentionConfig


def _block_k(args: PrefillPageAttentionArgs, platform: str, pairs: int | None = None) -> int:
    pages = scan_pages(
        slots=args.chunk_size,
        rows=1,
        token_bytes=2 * args.num_kv_heads * args.head_dim * jnp.dtype(args.dtype).itemsize,
        page_size=args.page_size,
        max_pages=args.num_pages,
        platform=platform,
        pairs=pairs,
    )
    return pages * args.page_size


def heuristic(args: PrefillPageAttentionArgs, platform: str) -> PrefillPageAttentionConfig:
    return PrefillPageAttentionConfig(block_k=_block_k(args, platform))


def candidates(args: PrefillPageAttentionArgs, platform: str) -> list[PrefillPageAttentionConfig]:
    blocks = sorted({_block_k(args, platform, p) for p in scan_pair_candidates(platform)})
    return [PrefillPageAttentionConfig(block_k=b) for b in blocks]


def pages_per_step(cfg: PrefillPageAttentionConfig, args: PrefillPageAttentionArgs) -> int:
    """Whole pages per step: ``block_k`` rounded down to pages, at least one."""
    assert cfg.block_k is not None
    return max(1, cfg.block_k // args.page_size)
