"""Tiles of the TPU ``blocksparse_attention``: rules, VMEM estimates, heuristics, autotune space.

Pure functions of shapes and dtype (no TPU needed). The tiles are also the granularity of the
mask's block classification: smaller tiles skip more of a sparse mask, larger ones amortize the
per-grid-step overhead. The kernels hold the flash kernels' tiles
(:mod:`..flash_attention.heuristics`) plus, per step, the int32 fine-mask tile of a partial
block and, with a pairwise ``attention_mask``, its int32 tile, both double-buffered.

Rules (TPU tiling): ``q_blocksize`` a multiple of 8 for float32 and of 16 for bfloat16,
``kv_blocksize`` a multiple of 128; blocks larger than the padded sequence are clamped to it.
"""

from __future__ import annotations

import itertools
from typing import Any

import jax.numpy as jnp

from ejkernel.ops import BwdParams, FwdParams
from ejkernel.ops.blocksparse_attention import BlockSparseAttentionArgs, BlockSparseAttentionConfig

from .._tiling import NUM_LANES, VMEM_BUDGET, sublanes
from ..flash_attention import heuristics as FH

_I32 = 4
_FWD_Q = (128, 256, 512)
_FWD_K = (128, 256, 512, 1024)


def _mask_bytes(block_q: int, block_k: int, pairwise: bool) -> int:
    return 2 * block_q * block_k * _I32 * (2 if pairwise else 1)


def vmem_bytes(args: BlockSparseAttentionArgs, block_q: int, block_k: int, backward: bool) -> int:
    """VMEM of one grid step of the forward (or the larger backward kernel) at these tiles."""
    vmem = FH.bwd_vmem_bytes if backward else FH.fwd_vmem_bytes
    itemsize = jnp.dtype(args.dtype).itemsize
    segments = args.q_segment_ids is not None
    need = vmem(block_q, block_k, args.head_dim, args.value_head_dim, itemsize, segments)
    return need + _mask_bytes(block_q, block_k, args.attention_mask is not None)


def effective_blocks(args: BlockSparseAttentionArgs, block_q: int, block_k: int) -> tuple[int, int]:
    return FH.effective_blocks(block_q, block_k, args.seq_q, args.seq_k, args.dtype)


def _fit(args: BlockSparseAttentionArgs, bq: int, bk: int, backward: bool) -> tuple[int, int]:
    """Halve the key tile (down to a lane row), then the query tile (down to a sublane tile),
    until a step fits the VMEM budget; then clamp to the sequences."""
    while vmem_bytes(args, bq, bk, backward) > VMEM_BUDGET and bk > NUM_LANES:
        bk //= 2
    while vmem_bytes(args, bq, bk, backward) > VMEM_BUDGET and bq > sublanes(args.dtype):
        bq //= 2
    return effective_blocks(args, bq, bk)


def heuristic(args: BlockSparseAttentionArgs) -> BlockSparseAttentionConfig:
    # The flash kernels' tiles (512 x 512 forward, 256 x 512 backward: splash attention's sizes
    # on v5e/v6e): 512-key tiles are already fine against the windows and documents of
    # long-context models (thousands of tokens), and smaller ones pay the per-step overhead.
    fq, fk = _fit(args, 512, 512, backward=False)
    bq, bk = _fit(args, 256, 512, backward=True)
    return BlockSparseAttentionConfig(
        fwd_params=FwdParams(q_blocksize=fq, kv_blocksize=fk), bwd_params=BwdParams(q_blocksize=bq, kv_blocksize=bk)
    )


def candidates(args: BlockSparseAttentionArgs) -> list[BlockSparseAttentionConfig]:
    """The heuristic, then every forward tile pair that fits (the backward kept at the heuristic's)."""
    base = heuristic(args)
    out = [base]
    for bq, bk in itertools.product(_FWD_Q, _FWD_K):
        eff = effective_blocks(args, bq, bk)
        if vmem_bytes(args, *eff, backward=False) > VMEM_BUDGET:
            continue
        cfg = BlockSparseAttentionConfig(
            fwd_params=FwdParams(q_blocksize=eff[0], kv_blocksize=eff[1]), bwd_params=base.bwd_params
        )
        if cfg not in out:
            out.append(cfg)
    return out


def check_blocks(name: str, params: FwdParams | BwdParams | None, dtype: Any) -> tuple[int, int]:
    """Raise ``ValueError`` unless ``params`` has tile-aligned block sizes; return them."""
    if params is None or params.q_blocksize is None or params.kv_blocksize is None:
        raise ValueError(f"pallas blocksparse_attention needs {name} with q_blocksize and kv_blocksize")
    sub = sublanes(dtype)
    if params.q_blocksize <= 0 or params.q_blocksize % sub:
        raise ValueError(
            f"pallas blocksparse_attention: {name}.q_blocksize must be a positive multiple of {sub} for "
            f"{jnp.dtype(dtype).name} (TPU sublane tiling), got {params.q_blocksize}"
        )
    if params.kv_blocksize <= 0 or params.kv_blocksize % NUM_LANES:
        raise ValueError(
            f"pallas blocksparse_attention: {name}.kv_blocksize must be a positive multiple of {NUM_LANES} "
            f"(TPU lanes), got {params.kv_blocksize}"
        )
    return params.q_blocksize, params.kv_blocksize
