"""Block sizes of the TPU ragged paged attention: rules, VMEM estimate, heuristic, autotune space.

``num_queries_per_block`` (``block_q``) is the packed query rows one grid step holds (times the
GQA groups: the rows of each kv head's matmuls); ``num_kv_pages_per_block`` (``pages``) the whole
pages one step of the walk copies and attends, in one of two VMEM slots. Pure functions of shapes
and dtype (no TPU needed). ``num_warps``/``num_stages`` are GPU knobs and are ignored.

The shapes say nothing of how the tokens split into sequences (``query_start_loc`` may be traced),
but ``total_tokens / max_num_seqs`` is the mean query length of a full batch: about 1 in decode
batches, where a large ``block_q`` would only multiply masked rows (a block holds many one-row
sequences, each attended by every row of the block), and large in prefill batches, where a small
one would re-read each sequence's pages once per query block.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from .._tiling import NUM_LANES, NUM_SUBLANES, VMEM_BUDGET, round_up, sublanes

_F32 = 4
# As in the paged decode kernel: about 512 cached tokens per step keeps the DMA engine, not the
# per-step overhead, setting the pace; more pages also means more copies issued per step.
_TARGET_TOKENS = 512
_MAX_PAGES = 64
_MAX_BLOCK_Q = 128
# Rows of one kv head's matmuls (block_q × groups) above which block_q is not raised further.
_MAX_ROWS = 512
_CANDIDATE_Q = (8, 16, 32, 64, 128, 256)
_CANDIDATE_TOKENS = (128, 256, 512, 1024, 2048)


def vmem_bytes(
    block_q: int, pages: int, *, page_size: int, num_heads: int, num_kv_heads: int, d: int, dtype: Any, sinks: int
) -> int:
    """VMEM of one grid step: the two page slots ``[2, pages, page_size, 2 * num_kv_heads, d]``,
    the double-buffered query and output blocks ``[block_q, num_heads, d]`` (minor dims padded to
    the ``(sublanes, 128)`` tile), the float32 ``m``/``l``/accumulator scratch and sinks, and about
    four ``[rows, pages × page_size]`` float32 temporaries (logits, probabilities, mask, exp)."""
    item, sub = jnp.dtype(dtype).itemsize, sublanes(dtype)
    dl = round_up(d, NUM_LANES)
    rows = round_up(block_q * (num_heads // num_kv_heads), NUM_SUBLANES)
    slots = 2 * pages * page_size * round_up(2 * num_kv_heads, sub) * dl * item
    blocks = 2 * 2 * block_q * round_up(num_heads, sub) * dl * item
    scratch = num_kv_heads * rows * (2 * NUM_LANES + dl + (NUM_LANES if sinks else 0)) * _F32
    temps = 4 * rows * round_up(pages * page_size, NUM_LANES) * _F32
    return slots + blocks + scratch + temps


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def _fits(block_q: int, pages: int, shape: dict[str, Any]) -> bool:
    return vmem_bytes(block_q, pages, **shape) <= VMEM_BUDGET


def _shape(page_size: int, num_heads: int, num_kv_heads: int, d: int, dtype: Any, sinks: int) -> dict[str, Any]:
    return dict(page_size=page_size, num_heads=num_heads, num_kv_heads=num_kv_heads, d=d, dtype=dtype, sinks=sinks)


def heuristic(
    total_tokens: int,
    max_num_seqs: int,
    pages_per_seq: int,
    page_size: int,
    num_heads: int,
    num_kv_heads: int,
    d: int,
    dtype: Any,
    sinks: int = 0,
) -> tuple[int, int]:
    """``(pages, block_q)``: ``block_q`` the mean query length of a full batch as a power of two in
    ``[8, 128]`` (at most ``_MAX_ROWS`` rows per kv head, no more than the tokens), ``pages`` up to
    ``_TARGET_TOKENS`` cached tokens (no more than a table has); pages, then ``block_q``, halved
    until the VMEM estimate fits."""
    shape = _shape(page_size, num_heads, num_kv_heads, d, dtype, sinks)
    groups = num_heads // num_kv_heads
    mean_q = total_tokens // max(1, max_num_seqs)
    block_q = min(
        _MAX_BLOCK_Q, max(NUM_SUBLANES, _pow2_floor(mean_q)), max(NUM_SUBLANES, _pow2_floor(_MAX_ROWS // groups))
    )
    block_q = min(block_q, round_up(total_tokens, NUM_SUBLANES))
    pages = max(1, min(pages_per_seq, _MAX_PAGES, _TARGET_TOKENS // page_size))
    while pages > 1 and not _fits(block_q, pages, shape):
        pages //= 2
    while block_q > NUM_SUBLANES and not _fits(block_q, pages, shape):
        block_q = max(NUM_SUBLANES, block_q // 2)
    return pages, block_q


def candidates(
    total_tokens: int,
    max_num_seqs: int,
    pages_per_seq: int,
    page_size: int,
    num_heads: int,
    num_kv_heads: int,
    d: int,
    dtype: Any,
    sinks: int = 0,
) -> list[tuple[int, int]]:
    """``(pages, block_q)`` pairs to autotune over: ``block_q`` in 8…256 (no more than the tokens)
    × 128…2048 cached tokens per step, deduplicated, each fitting the VMEM budget."""
    shape = _shape(page_size, num_heads, num_kv_heads, d, dtype, sinks)
    out: list[tuple[int, int]] = []
    for block_q in _CANDIDATE_Q:
        block_q = min(block_q, round_up(total_tokens, NUM_SUBLANES))
        for tokens in _CANDIDATE_TOKENS:
            pages = max(1, min(pages_per_seq, _MAX_PAGES, tokens // page_size))
            if (pages, block_q) not in out and _fits(block_q, pages, shape):
                out.append((pages, block_q))
    return out


def check(
    pages: int | None,
    block_q: int | None,
    page_size: int,
    num_heads: int,
    num_kv_heads: int,
    d: int,
    dtype: Any,
    sinks: int = 0,
) -> None:
    """``ValueError`` unless ``pages`` is in ``[1, _MAX_PAGES]``, ``block_q`` a positive multiple
    of 8 (the float32 row statistics' sublane tile) and the two fit the VMEM budget."""
    name = "pallas ragged_page_attention_v2"
    if pages is None or block_q is None:
        raise ValueError(f"{name} needs num_kv_pages_per_block and num_queries_per_block")
    if not 1 <= pages <= _MAX_PAGES:
        raise ValueError(f"{name}: num_kv_pages_per_block must be in [1, {_MAX_PAGES}], got {pages}")
    if block_q <= 0 or block_q % NUM_SUBLANES:
        raise ValueError(f"{name}: num_queries_per_block must be a positive multiple of {NUM_SUBLANES}, got {block_q}")
    shape = _shape(page_size, num_heads, num_kv_heads, d, dtype, sinks)
    need = vmem_bytes(block_q, pages, **shape)
    if need > VMEM_BUDGET:
        raise ValueError(
            f"{name}: {pages} pages per step with {block_q} queries per block need about {need >> 20} MiB of "
            f"VMEM, more than the {VMEM_BUDGET >> 20} MiB budget"
        )
