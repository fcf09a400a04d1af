"""Launch configs of the CUDA paged decode, as pure functions of the shapes.

Pass 1 runs one 128-thread CTA per (partition, KV head, tile of up to 8 query heads, sequence).
It streams its partition's K and V rows through a ring of ``stages`` shared-memory slots with
cp.async, ``stages - 1`` slots in flight while one is consumed. bf16/fp16 caches of head dim <= 128
use the tensor cores (a slot holds 64 tokens: 16 per warp, 32 KiB at d128); float32 caches, head
dim 256 and ``variant`` 1 use FMAs (16 KiB slots). Decode is memory-bound: what matters is the
bytes in flight per SM (resident CTAs x (stages - 1) x slot) and enough CTAs that the last wave
is short; each partition's fixed work (q, the ring's fill, one partial row per head, the split-K
merge) must stay small.
"""

from __future__ import annotations

import math

HEAD_DIMS = (64, 128, 256)
THREADS = 128
FMA_STAGE_BYTES = 16 * 1024
MMA_TOKENS = 64
MIN_STAGES, MAX_STAGES = 2, 6
PARTITIONS = (256, 512, 1024, 2048, 4096, 8192)
SMEM_PER_SM = 227 * 1024  # H100/H200 (sm_90): usable shared memory per SM
SMEM_LIMIT = 200 * 1024  # what the FFI handler accepts for one CTA
# Split-K target: at least this many CTAs per resident slot (a nearly full single wave), since
# each partition's fill and merge cost more than a short last wave, and a single partition per
# sequence needs no merge pass at all (pass 1 writes the output). On an H200 at b32 h32/8 d128
# ctx8192 bf16, 8192-token partitions (0.97 waves) beat 4096, 2048 and 1024 (1.9, 3.9 and 7.8
# waves), and so does one CTA per partition against a persistent kernel (one wave of CTAs taking
# partitions from a counter; branch experiment/persistent-decode) at any partition length
# (benchmarks/results/h200/page_attention.json, the CUDA partition sweep at ctx 8192).
WAVES = 0.95


def head_tile(groups: int) -> int:
    """Query heads per CTA (the kernel's G): the next power of two of the GQA ratio, at most 8."""
    g = 1
    while g < groups and g < 8:
        g *= 2
    return g


def uses_mma(itemsize: int, head_dim: int, variant: int = 0) -> bool:
    """The tensor-core path (``uses_mma`` in csrc/page_attention/paged_decode.cuh); variant 1 is the FMA path."""
    return itemsize == 2 and variant != 1 and head_dim <= 128


def stage_bytes(head_dim: int, itemsize: int, variant: int = 0) -> int:
    return 2 * MMA_TOKENS * head_dim * itemsize if uses_mma(itemsize, head_dim, variant) else FMA_STAGE_BYTES


def resident_ctas(groups: int, head_dim: int, itemsize: int = 2, variant: int = 0) -> int:
    """CTAs of pass 1 per SM that the heuristic plans for. The tensor-core path is built for 3 (168
    registers) but at d128 runs best as 2 CTAs x 3 slots of 32 KiB (on an H200 at b32 h32/8
    ctx8192, 3 CTAs x 2 slots is 6-23% slower); at d64 4. The FMA path by registers (ptxas
    -v, sm_90a): ~250 for 8-head tiles (2), 130-155 for 4 heads (3), under 100 below (4)."""
    if uses_mma(itemsize, head_dim, variant):
        return 2 if head_dim == 128 else 4
    g = head_tile(groups)
    return 2 if g >= 8 else (3 if g == 4 else 4)


def smem_bytes(
    groups: int, head_dim: int, partition: int, block_size: int, stages: int, itemsize: int = 2, variant: int = 0
) -> int:
    """Dynamic shared memory of pass 1 (mirrors ``split_smem_bytes`` in csrc/page_attention/paged_decode.cuh)."""
    merge = 4 * (THREADS // 32) * head_tile(groups) * (head_dim + 2)
    ring = max(stages * stage_bytes(head_dim, itemsize, variant), merge)
    return ring + 4 * (partition // block_size + 2)


def heuristic_stages(
    groups: int,
    head_dim: int,
    partition: int,
    block_size: int,
    itemsize: int = 2,
    variant: int = 0,
    smem_per_sm: int = SMEM_PER_SM,
    smem_per_block: int = SMEM_LIMIT,
) -> int:
    """The deepest ring that still lets the register-limited number of CTAs share an SM (of
    ``smem_per_sm`` bytes, at most ``smem_per_block`` per CTA: the device's, Hopper's by default)."""
    ctas = resident_ctas(groups, head_dim, itemsize, variant)
    limit = min(smem_per_block, SMEM_LIMIT)
    for stages in range(MAX_STAGES, MIN_STAGES - 1, -1):
        smem = smem_bytes(groups, head_dim, partition, block_size, stages, itemsize, variant)
        if ctas * (smem + 1024) <= smem_per_sm and smem <= limit:
            return stages
    return MIN_STAGES


def effective_context(max_context: int, window_left: int | None) -> int:
    """Tokens a sequence can attend: the whole context, or the window's ``left + 1``."""
    return max_context if window_left is None else max(1, min(max_context, window_left + 1))


def num_splits(context: int, partition: int) -> int:
    return max(1, math.ceil(context / partition))


def heuristic_partition(
    batch: int, kv_heads: int, groups: int, head_dim: int, context: int, block_size: int, sms: int, itemsize: int = 2
) -> int:
    """The largest partition that still yields ``WAVES`` CTAs per resident slot (at least 256
    tokens: shorter ones spend more on fixed work than they gain), capped by the context."""
    tiles = math.ceil(groups / head_tile(groups))
    work = batch * kv_heads * tiles
    target = WAVES * resident_ctas(groups, head_dim, itemsize) * max(sms, 1)
    choice = PARTITIONS[0]
    for p in sorted(PARTITIONS, reverse=True):
        if work * num_splits(context, p) >= target:
            choice = p
            break
    # A context shorter than the partition needs one partition of (about) its own length.
    return min(choice, max(32, -(-context // 32) * 32))


def candidate_configs(
    groups: int, head_dim: int, context: int, block_size: int, itemsize: int = 2
) -> list[tuple[int, int]]:
    """(partition, stages) pairs for the autotuner: every partition, at 2 stages and the deepest
    ring its resident CTAs allow."""
    out: list[tuple[int, int]] = []
    for p in PARTITIONS:
        p = min(p, max(32, -(-context // 32) * 32))
        deepest = heuristic_stages(groups, head_dim, p, block_size, itemsize)
        for stages in sorted({MIN_STAGES, deepest}):
            if (p, stages) not in out and smem_bytes(groups, head_dim, p, block_size, stages, itemsize) <= SMEM_LIMIT:
                out.append((p, stages))
    return out
