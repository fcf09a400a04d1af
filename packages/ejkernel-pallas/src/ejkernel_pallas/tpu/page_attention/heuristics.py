"""Pages per step of the TPU paged decode: rules, VMEM estimate, heuristic, autotune space.

``PageAttentionConfig.tokens_per_block`` is the number of cached tokens one grid step copies and
attends: ``pages_per_step = tokens_per_block // block_size`` whole pages, fetched by DMA into one
of two VMEM slots while the other slot is being attended. Pure functions of shapes and dtype (no
TPU needed); they return tokens per step (``pages × block_size``).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from .._tiling import VMEM_BUDGET, round_up, sublanes

# One step should move enough bytes that the DMA engine, not the per-step overhead (~0.35 µs a
# grid step, the figure of JAX's Pallas TPU guides) or the per-copy issue cost, sets the pace:
# 512 tokens × 8 kv heads × 128 dims × 2 bytes × K and V is 2 MiB per step. More pages per step
# also means more copies issued per step, so cap them.
_TARGET_TOKENS = 512
_MAX_PAGES_PER_STEP = 64


def buffer_bytes(
    pages: int, block_size: int, num_kv_heads: int, d: int, dv: int, dtype: Any, heads_major: bool = False
) -> int:
    """VMEM of the two K/V slots: ``[2, pages, block_size, num_kv_heads, d (dv)]`` (``heads_major``:
    ``[2, pages, num_kv_heads, block_size, d (dv)]``), the two minor dims padded to the
    ``(sublanes, 128)`` tile."""
    outer, rows = (num_kv_heads, block_size) if heads_major else (block_size, num_kv_heads)
    per_row_block = round_up(rows, sublanes(dtype)) * (round_up(d, 128) + round_up(dv, 128))
    return 2 * pages * outer * per_row_block * jnp.dtype(dtype).itemsize


def _fits(pages: int, block_size: int, num_kv_heads: int, d: int, dv: int, dtype: Any, heads_major: bool) -> bool:
    return buffer_bytes(pages, block_size, num_kv_heads, d, dv, dtype, heads_major) <= VMEM_BUDGET // 2


def heuristic(
    block_size: int, max_blocks: int, num_kv_heads: int, d: int, dv: int, dtype: Any, heads_major: bool = False
) -> int:
    """Tokens per step: up to ``_TARGET_TOKENS`` (whole pages, no more than the table has),
    halving the pages until the two K/V slots fit."""
    pages = max(1, min(max_blocks, _MAX_PAGES_PER_STEP, _TARGET_TOKENS // block_size))
    while pages > 1 and not _fits(pages, block_size, num_kv_heads, d, dv, dtype, heads_major):
        pages //= 2
    return pages * block_size


def candidates(
    block_size: int, max_blocks: int, num_kv_heads: int, d: int, dv: int, dtype: Any, heads_major: bool = False
) -> list[int]:
    """Tokens per step to autotune over (deduplicated, each fitting the VMEM budget)."""
    out: list[int] = []
    for target in (128, 256, 512, 1024, 2048):
        pages = max(1, min(max_blocks, _MAX_PAGES_PER_STEP, target // block_size))
        tokens = pages * block_size
        if tokens not in out and _fits(pages, block_size, num_kv_heads, d, dv, dtype, heads_major):
            out.append(tokens)
    return out


def check(
    tokens: int | None,
    block_size: int,
    num_kv_heads: int,
    d: int,
    dv: int,
    dtype: Any,
    heads_major: bool = False,
) -> int:
    """Pages per step of ``tokens`` (``tokens_per_block``); ``ValueError`` unless it is a positive
    multiple of the cache's block size that fits the VMEM budget."""
    if tokens is None:
        raise ValueError("pallas page_attention needs tokens_per_block (cached tokens per step)")
    if tokens <= 0 or tokens % block_size:
        raise ValueError(
            f"pallas page_attention: tokens_per_block ({tokens}) must be a positive multiple of the cache's "
            f"block_size ({block_size}): steps copy whole pages"
        )
    pages = tokens // block_size
    if pages > _MAX_PAGES_PER_STEP:
        raise ValueError(f"pallas page_attention: at most {_MAX_PAGES_PER_STEP} pages per step, got {pages}")
    if not _fits(pages, block_size, num_kv_heads, d, dv, dtype, heads_major):
        raise ValueError(
            f"pallas page_attention: {pages} pages per step need "
            f"{buffer_bytes(pages, block_size, num_kv_heads, d, dv, dtype, heads_major) >> 20} MiB of VMEM for K/V, "
            "more than "
            f"{(VMEM_BUDGET // 2) >> 20} MiB"
        )
    return pages
