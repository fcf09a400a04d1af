"""The XLA ``blocksparse_attention`` implementation: what it declares, its configs, its entry point."""

from __future__ import annotations

from typing import ClassVar

from ejkernel.ops import BwdParams, DeviceInfo, FwdParams, KernelImpl, OpConfig
from ejkernel.ops.blocksparse_attention import BlockSparseAttentionArgs, BlockSparseAttentionConfig

from . import heuristics as H
from ._kernel import blocksparse_attention


class XlaBlockSparseAttention(KernelImpl):
    """Block-sparse FlashAttention-2 in plain JAX: per query tile, a loop over the key tiles the
    block schedule lists (gathered by index), online softmax, fine masks on partial tiles only;
    a custom VJP recomputes the tiles in the backward (memory linear in the sequence)."""

    version = "1"
    unsupported: ClassVar[dict[str, str]] = {
        "bias": "a dense [batch, heads, seq_q, seq_k] bias defeats block sparsity: use flash_attention for a bias",
    }
    # Small tiles (and different ones for the backward) so the small cases span many tiles.
    test_configs: ClassVar[dict[str, OpConfig]] = {
        "tiles16x16-bwd8x32": BlockSparseAttentionConfig(
            fwd_params=FwdParams(q_blocksize=16, kv_blocksize=16), bwd_params=BwdParams(q_blocksize=8, kv_blocksize=32)
        )
    }

    def heuristic_cfg(self, args: BlockSparseAttentionArgs, device: DeviceInfo) -> BlockSparseAttentionConfig:
        return H.heuristic(args, device.platform)

    def candidate_cfgs(self, args: BlockSparseAttentionArgs, device: DeviceInfo) -> list[BlockSparseAttentionConfig]:
        return H.candidates(args)

    def validate_cfg(self, cfg: BlockSparseAttentionConfig, args: BlockSparseAttentionArgs, device: DeviceInfo) -> None:
        for name, params in (("fwd_params", cfg.fwd_params), ("bwd_params", cfg.bwd_params)):
            if params is None or params.q_blocksize is None or params.kv_blocksize is None:
                raise ValueError(f"xla blocksparse_attention needs {name} with q_blocksize and kv_blocksize")

    def run(self, args: BlockSparseAttentionArgs, cfg: BlockSparseAttentionConfig):
        fwd, bwd = cfg.fwd_params, cfg.bwd_params
        return blocksparse_attention(args, (fwd.q_blocksize, fwd.kv_blocksize), (bwd.q_blocksize, bwd.kv_blocksize))
