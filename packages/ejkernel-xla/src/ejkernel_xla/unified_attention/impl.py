"""The XLA ``unified_attention`` implementation: what it declares, its configs, its entry point."""

from __future__ import annotations

from typing import ClassVar

import jax

from ejkernel.ops import DeviceInfo, KernelImpl, OpConfig
from ejkernel.ops.unified_attention import UnifiedAttentionArgs, UnifiedAttentionConfig

from . import heuristics as H
from ._kernel import unified_attention


class XlaUnifiedAttention(KernelImpl):
    """Unified attention in plain JAX (per-row block gathers + online softmax), any device. The
    GPU kernels' ``seq_threshold_3d``, ``num_par_softmax_segments``, ``num_warps`` and
    ``num_stages`` do not apply (one scan serves decodes and prefills alike)."""

    # One block per step: many steps, ranges that start and end inside blocks.
    test_configs: ClassVar[dict[str, OpConfig]] = {"page1": UnifiedAttentionConfig(block_dim=1)}

    def heuristic_cfg(self, args: UnifiedAttentionArgs, device: DeviceInfo) -> UnifiedAttentionConfig:
        return H.configs(args, device.platform)[0]

    def candidate_cfgs(self, args: UnifiedAttentionArgs, device: DeviceInfo) -> list[UnifiedAttentionConfig]:
        return H.configs(args, device.platform)[1]

    def validate_cfg(self, cfg: UnifiedAttentionConfig, args: UnifiedAttentionArgs, device: DeviceInfo) -> None:
        if cfg.block_dim is None:
            raise ValueError("xla unified_attention needs block_dim (cached tokens per step)")

    def run(self, args: UnifiedAttentionArgs, cfg: UnifiedAttentionConfig) -> jax.Array | tuple[jax.Array, jax.Array]:
        return unified_attention(args, H.pages_per_step(cfg, args), H.block_q(args))
