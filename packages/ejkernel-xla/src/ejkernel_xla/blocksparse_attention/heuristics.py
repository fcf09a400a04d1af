"""Tile sizes of the XLA block-sparse attention: pure functions of the shapes and the device kind.

The tiles are also the granularity of the mask's classification: smaller ones skip more of a
sparse mask and apply fine masks to fewer pairs, larger ones amortize each loop iteration's fixed
cost (several fused kernels on accelerators, thread-pool dispatch on CPU).
"""

from __future__ import annotations

from ejkernel.ops import BwdParams, FwdParams
from ejkernel.ops.blocksparse_attention import BlockSparseAttentionArgs, BlockSparseAttentionConfig

from .._tiles import round_up

SIZES = (64, 128, 256, 512)


def _config(bq: int, bk: int) -> BlockSparseAttentionConfig:
    return BlockSparseAttentionConfig(
        fwd_params=FwdParams(q_blocksize=bq, kv_blocksize=bk), bwd_params=BwdParams(q_blocksize=bq, kv_blocksize=bk)
    )


def heuristic(args: BlockSparseAttentionArgs, platform: str) -> BlockSparseAttentionConfig:
    if platform == "cpu":
        # Square 128 tiles: masks of windows, chunks and documents of a few hundred tokens still
        # leave most tiles empty, and each iteration's dispatch cost stays small against its work.
        return _config(128, 128)
    # Accelerators: fewer, larger iterations (each launches several kernels).
    return _config(256, 512)


def candidates(args: BlockSparseAttentionArgs) -> list[BlockSparseAttentionConfig]:
    """Every (q, kv) pair of tile sizes, without those that tile the sequence like a smaller one."""
    seen: set[tuple[int, int]] = set()
    out = []
    for bq in SIZES:
        for bk in SIZES:
            eff = (min(bq, round_up(args.seq_q, 8)), min(bk, round_up(args.seq_k, 8)))
            if eff in seen:
                continue
            seen.add(eff)
            out.append(_config(bq, bk))
    return out
