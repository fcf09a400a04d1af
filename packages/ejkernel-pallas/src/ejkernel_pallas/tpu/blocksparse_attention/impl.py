"""The Pallas TPU ``blocksparse_attention`` implementation: what it declares, its configs, its entry."""

from __future__ import annotations

from typing import ClassVar

import jax

from ejkernel.ops import BwdParams, DeviceInfo, FwdParams, KernelImpl, OpConfig
from ejkernel.ops.blocksparse_attention import BlockSparseAttentionArgs, BlockSparseAttentionConfig

from .._tiling import VMEM_BUDGET, tpu_decline
from . import heuristics as H

NO_BIAS = "a dense [batch, heads, seq_q, seq_k] bias defeats block sparsity: use flash_attention for a bias"


class PallasTpuBlockSparseAttention(KernelImpl):
    """Block-sparse FlashAttention-2 forward and backward (dQ; dK/dV) as Mosaic TPU Pallas kernels
    in the splash-attention style (TPU v4 and newer): a grid over (batch, head, query tile,
    visited-key-tile slot) with the core's block schedule in scalar prefetch, so only visited
    tiles are fetched, fine masks (static pattern, documents, pairwise) applied on partial tiles
    only, GQA through the key/value index maps, soft cap and sinks."""

    version = "1"
    device_requirement = "a TPU"
    # No float16: TPUs have no fast float16 path (bfloat16 is their 16-bit type).
    dtypes: ClassVar[tuple[str, ...]] = ("float32", "bfloat16")
    # Head dims above 128 that are not a multiple of 128 are zero-padded to one (as the flash kernels').
    max_sizes: ClassVar[dict[str, int]] = {"head_dim": 256, "value_head_dim": 256}
    unsupported: ClassVar[dict[str, str]] = {"bias": NO_BIAS}
    # The smallest TPU tiles (16 query rows, 128 keys), the backward tiled differently.
    test_configs: ClassVar[dict[str, OpConfig]] = {
        "tiles16x128-bwd32x128": BlockSparseAttentionConfig(
            fwd_params=FwdParams(q_blocksize=16, kv_blocksize=128),
            bwd_params=BwdParams(q_blocksize=32, kv_blocksize=128),
        )
    }

    def available(self, device: DeviceInfo) -> str | None:
        return tpu_decline(device)

    def heuristic_cfg(self, args: BlockSparseAttentionArgs, device: DeviceInfo) -> BlockSparseAttentionConfig:
        return H.heuristic(args)

    def candidate_cfgs(self, args: BlockSparseAttentionArgs, device: DeviceInfo) -> list[BlockSparseAttentionConfig]:
        return H.candidates(args)

    def validate_cfg(self, cfg: BlockSparseAttentionConfig, args: BlockSparseAttentionArgs, device: DeviceInfo) -> None:
        for name, params, backward in (("fwd_params", cfg.fwd_params, False), ("bwd_params", cfg.bwd_params, True)):
            bq, bk = H.effective_blocks(args, *H.check_blocks(name, params, args.dtype))
            need = H.vmem_bytes(args, bq, bk, backward)
            if need > VMEM_BUDGET:
                raise ValueError(
                    f"pallas blocksparse_attention: {name} {bq}x{bk} needs about {need >> 20} MiB of VMEM, more "
                    f"than the {VMEM_BUDGET >> 20} MiB budget"
                )

    def run(self, args: BlockSparseAttentionArgs, cfg: BlockSparseAttentionConfig) -> jax.Array:
        from ._call import blocksparse_attention

        return blocksparse_attention(args, cfg)
