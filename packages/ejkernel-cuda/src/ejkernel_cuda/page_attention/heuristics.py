"""Partition (split-K) sizes of the CUDA paged decode, as pure functions of the shapes.

Pass 1 runs one 128-thread CTA per (partition, KV head, tile of up to 8 query heads, sequence);
each streams its partition's K then V pages once. Decode is memory-bound: the CTA count must
keep every SM's load pipeline full, while each partition's fixed work (loading q, the softmax
pass over its logits, writing one partial row per head) stays small against its loads.
"""

from __future__ import annotations

import math

HEAD_DIMS = (64, 128, 256)
WARPS = 4  # 128-thread CTAs
PARTITIONS = (128, 256, 512, 1024, 2048)
# Measured on an H200 (b32 h32/8 d128 ctx8192 bf16 bs16, device time, 2026-11-21): partitions
# of 128/256/512/1024/2048 tokens took 0.60/0.50/0.44/0.42/0.40 ms. Fewer, longer partitions
# win while there are still ~1.5 waves of the 4 resident CTAs per SM (128 registers per thread):
# the split-K merge and each partition's fixed work (q, softmax pass, partial rows) cost more
# than a short tail.
CTAS_PER_SM = 6
# Logits [G, partition] plus the P·V reduction [warps, G, D] in shared memory; stay under the default
# 48 KiB carve-out for the heuristic, under 96 KiB for autotune candidates.
HEURISTIC_SMEM = 48 * 1024
CANDIDATE_SMEM = 96 * 1024


def head_tile(groups: int) -> int:
    """Query heads per CTA (the kernel's G): the next power of two of the GQA ratio, at most 8."""
    g = 1
    while g < groups and g < 8:
        g *= 2
    return g


def smem_bytes(groups: int, head_dim: int, partition: int, block_size: int) -> int:
    """Dynamic shared memory of pass 1 (mirrors ``split_smem_bytes`` in paged_decode.cuh)."""
    g = head_tile(groups)
    return 4 * (g * partition + WARPS * g * head_dim) + 4 * (partition // block_size + 2)


def effective_context(max_context: int, window_left: int | None) -> int:
    """Tokens a sequence can attend: the whole context, or the window's ``left + 1``."""
    return max_context if window_left is None else max(1, min(max_context, window_left + 1))


def num_splits(context: int, partition: int) -> int:
    return max(1, math.ceil(context / partition))


def heuristic_partition(
    batch: int, kv_heads: int, groups: int, head_dim: int, context: int, block_size: int, sms: int
) -> int:
    """The largest partition that still yields ``CTAS_PER_SM`` CTAs per SM, at least 256 tokens
    (smaller ones spend more on per-partition work than they gain), capped by the context."""
    tiles = math.ceil(groups / head_tile(groups))
    work = batch * kv_heads * tiles
    target = CTAS_PER_SM * max(sms, 1)
    choice = 256
    for p in sorted(PARTITIONS, reverse=True):
        if p < 256 or smem_bytes(groups, head_dim, p, block_size) > HEURISTIC_SMEM:
            continue
        if work * num_splits(context, p) >= target:
            choice = p
            break
    # A context shorter than the partition needs one partition of (about) its own length.
    return min(choice, max(32, -(-context // 32) * 32))


def candidate_partitions(groups: int, head_dim: int, context: int, block_size: int) -> list[int]:
    out = []
    for p in PARTITIONS:
        p = min(p, max(32, -(-context // 32) * 32))
        if p not in out and smem_bytes(groups, head_dim, p, block_size) <= CANDIDATE_SMEM:
            out.append(p)
    return out
