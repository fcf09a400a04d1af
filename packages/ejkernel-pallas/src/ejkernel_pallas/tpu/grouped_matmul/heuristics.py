"""Tiles of the TPU grouped GEMM (pure functions of the shapes and dtype).

``block_m`` rows per visit (a multiple of the dtype's sublane tile: 8 rows of 32-bit, 16 of
16-bit values); ``block_n``/``block_k`` along lane-mapped axes (multiples of 128, or the whole axis
when it is not one: ``_call.fit``). Megablox's default ``(128, 128, 128)`` keeps a visit's
blocks far under the VMEM budget; fewer, larger row tiles waste more rows per group (a group's
last tile is on average half empty), so ``block_m`` shrinks when groups are small.
"""

from __future__ import annotations

import jax.numpy as jnp

from ejkernel.ops.grouped_matmul import GroupedMatmulConfig

from .._tiling import VMEM_BUDGET


def sublane_rows(dtype) -> int:
    return 16 if jnp.dtype(dtype).itemsize == 2 else 8


def vmem_bytes(cfg: GroupedMatmulConfig, itemsize: int) -> int:
    """Double-buffered input and output blocks plus the float32 accumulator."""
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    assert bm and bn and bk
    return 2 * (bm * bk + bk * bn + bm * bn) * itemsize + 4 * bm * bn


def heuristic(m: int, groups: int, dtype) -> GroupedMatmulConfig:
    rows = sublane_rows(dtype)
    per_group = m / max(groups, 1)
    block_m = 128 if per_group >= 128 else max(rows, 64 if per_group >= 64 else 32)
    return GroupedMatmulConfig(block_m=block_m, block_n=512, block_k=512, num_warps=None, num_stages=None, split_k=1)


def candidates(m: int, groups: int, dtype) -> list[GroupedMatmulConfig]:
    itemsize = jnp.dtype(dtype).itemsize
    out = []
    for bm in (64, 128, 256, 512):
        for bn, bk in ((128, 128), (256, 256), (512, 512), (256, 1024), (1024, 256)):
            cfg = GroupedMatmulConfig(block_m=bm, block_n=bn, block_k=bk, split_k=1)
            if vmem_bytes(cfg, itemsize) <= VMEM_BUDGET:
                out.append(cfg)
    return out
