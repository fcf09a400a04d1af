"""Tiles of the Triton ``blocksparse_attention``: pure functions of the shapes, dtype and device.

The kernels hold the same tiles as ``flash_attention``'s (a resident query tile and streamed
key/value tiles forward; resident key/value or query/dO tiles and streamed others backward), so
their shared memory is the flash kernels' (:mod:`..flash_attention.heuristics`) plus the int8
fine-mask tiles of partial blocks, one per stage. A pipelined float32 dK/dV kernel (2 stages or
more) also stages the P / dS operand of its dV / dK products, split in two for the tf32x3
products: two float32 ``[kv_blocksize, q_blocksize]`` tiles (Triton 3.6, sm_90, d 64, 32x64
tiles, 2 stages: 114948 B compiled, 103424 B without them; single-stage kernels at 16x16 to 32x32
tiles, d 64 to 256, compiled within the flash kernels' figure on sm_86).
"""

from __future__ import annotations

import jax.numpy as jnp

from ejkernel.ops import BwdParams, FwdParams, Need
from ejkernel.ops.blocksparse_attention import BlockSparseAttentionArgs, BlockSparseAttentionConfig

from ..flash_attention.heuristics import bwd_smem, fwd_smem, smem_limit

# Forward tiles from largest to smallest (FlashAttention-2's 128 x 64 for one warpgroup first);
# the first that fits the device's shared memory is taken.
FWD_TILES = ((128, 64, 2), (64, 64, 2), (64, 64, 1), (64, 32, 1), (32, 32, 1), (16, 16, 1))
BWD_TILES = ((64, 64, 2), (64, 64, 1), (32, 64, 1), (32, 32, 1), (16, 32, 1), (16, 16, 1))


def _sizes(args: BlockSparseAttentionArgs) -> tuple[int, int, int]:
    return args.head_dim, args.value_head_dim, jnp.dtype(args.dtype).itemsize


def needs(args: BlockSparseAttentionArgs, cfg: BlockSparseAttentionConfig) -> list[Need]:
    f, b = cfg.fwd_params, cfg.bwd_params
    assert f is not None and b is not None and f.num_warps and b.num_warps
    d, dv, itemsize = _sizes(args)
    masks_f = (f.num_stages or 1) * (f.q_blocksize or 0) * (f.kv_blocksize or 0)
    masks_b = (b.num_stages or 1) * (b.q_blocksize or 0) * (b.kv_blocksize or 0)
    pipelined_f32 = itemsize == 4 and (b.num_stages or 1) >= 2
    staged = 2 * (b.q_blocksize or 0) * (b.kv_blocksize or 0) * 4 if pipelined_f32 else 0
    backward = bwd_smem(b, d, dv, itemsize) + masks_b
    return [
        Need("forward", fwd_smem(f, d, dv, itemsize) + masks_f, 32 * f.num_warps),
        Need("backward dQ", backward, 32 * b.num_warps),
        Need("backward dK/dV", backward + staged, 32 * b.num_warps),
    ]


def heuristic(args: BlockSparseAttentionArgs, cc: tuple[int, int] | None) -> BlockSparseAttentionConfig:
    """The largest tiles of ``FWD_TILES`` / ``BWD_TILES`` whose needs fit the device's shared
    memory; 8 warps for a 128-row forward tile past head dim 64 (two warpgroups' worth of rows)."""
    d = args.head_dim
    limit = smem_limit(cc)
    cfg = None
    for fq, fk, fs in FWD_TILES:
        warps = 8 if fq >= 128 and d > 64 else 4
        f = FwdParams(q_blocksize=fq, kv_blocksize=fk, num_warps=warps, num_stages=fs)
        for bq, bk, bs in BWD_TILES:
            b = BwdParams(q_blocksize=bq, kv_blocksize=bk, num_warps=4, num_stages=bs)
            cfg = BlockSparseAttentionConfig(fwd_params=f, bwd_params=b)
            if max(n.shared_memory for n in needs(args, cfg)) <= limit:
                return cfg
    assert cfg is not None
    return cfg  # the smallest tiles: what still does not fit is reported by the resolution's check
