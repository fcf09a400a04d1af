"""The Triton ``blocksparse_attention`` implementation: what it declares, its configs, its entry point."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import jax

from ejkernel.ops import BwdParams, DeviceInfo, FwdParams, KernelImpl, Need, OpConfig
from ejkernel.ops.blocksparse_attention import BlockSparseAttentionArgs, BlockSparseAttentionConfig

from .._launch import gpu_availability
from ..flash_attention.heuristics import smem_limit
from . import heuristics as H


def _config(fwd: tuple[int, int, int, int], bwd: tuple[int, int, int, int]) -> BlockSparseAttentionConfig:
    return BlockSparseAttentionConfig(
        fwd_params=FwdParams(q_blocksize=fwd[0], kv_blocksize=fwd[1], num_warps=fwd[2], num_stages=fwd[3]),
        bwd_params=BwdParams(q_blocksize=bwd[0], kv_blocksize=bwd[1], num_warps=bwd[2], num_stages=bwd[3]),
    )


class TritonBlockSparseAttention(KernelImpl):
    """Block-sparse FlashAttention-2 forward and backward (dQ; dK/dV) in Triton for NVIDIA GPUs
    (compute capability >= 8.0), over the core's block schedule: only visited tiles are loaded,
    fine masks are built only on partial tiles."""

    version = "1"
    device_requirement = "an NVIDIA GPU"
    dtypes = ("float16", "bfloat16", "float32")
    max_sizes: ClassVar[Mapping[str, int]] = {"head_dim": 256, "value_head_dim": 256}
    unsupported: ClassVar[Mapping[str, str]] = {
        "bias": "a dense [batch, heads, seq_q, seq_k] bias defeats block sparsity: use flash_attention for a bias",
    }
    # Small tiles, the backward tiled differently from the forward: several tiles on small inputs.
    test_configs: ClassVar[Mapping[str, OpConfig]] = {"tiles16x16-bwd16x32": _config((16, 16, 4, 1), (16, 32, 4, 1))}

    def available(self, device: DeviceInfo) -> str | None:
        return gpu_availability(device)

    def heuristic_cfg(self, args: BlockSparseAttentionArgs, device: DeviceInfo) -> BlockSparseAttentionConfig:
        return H.heuristic(args, device.compute_capability)

    def candidate_cfgs(self, args: BlockSparseAttentionArgs, device: DeviceInfo) -> list[BlockSparseAttentionConfig]:
        out = [self.heuristic_cfg(args, device)]
        limit = smem_limit(device.compute_capability)
        for bq, bk in ((64, 64), (128, 128), (64, 128), (128, 32)):
            for warps in (4, 8):
                cfg = _config((bq, bk, warps, 2), (64, 64, 4, 2))
                if cfg not in out and max(n.shared_memory for n in H.needs(args, cfg)) <= limit:
                    out.append(cfg)
        return out

    def resources(
        self, cfg: BlockSparseAttentionConfig, args: BlockSparseAttentionArgs, device: DeviceInfo
    ) -> list[Need]:
        return H.needs(args, cfg)

    def validate_cfg(self, cfg: BlockSparseAttentionConfig, args: BlockSparseAttentionArgs, device: DeviceInfo) -> None:
        for name, params in (("fwd_params", cfg.fwd_params), ("bwd_params", cfg.bwd_params)):
            fields = (params.q_blocksize, params.kv_blocksize, params.num_warps, params.num_stages) if params else ()
            if not fields or any(f is None for f in fields):
                raise ValueError(
                    f"triton blocksparse_attention needs {name} with q_blocksize, kv_blocksize, num_warps, num_stages"
                )
            for size in fields[:2]:
                if size < 16 or size & (size - 1):
                    raise ValueError(f"triton blocksparse_attention: {name} tile sizes must be powers of two >= 16")

    def run(self, args: BlockSparseAttentionArgs, cfg: BlockSparseAttentionConfig) -> jax.Array:
        from ._call import blocksparse_attention

        return blocksparse_attention(args, cfg)
