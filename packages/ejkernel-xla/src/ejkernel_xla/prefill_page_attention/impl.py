"""The XLA ``prefill_page_attention`` implementation: what it declares, its configs, its entry point."""

from __future__ import annotations

from typing import ClassVar

import jax

from ejkernel.ops import DeviceInfo, KernelImpl, OpConfig
from ejkernel.ops.prefill_page_attention import PrefillPageAttentionArgs, PrefillPageAttentionConfig

from . import heuristics as H
from ._kernel import prefill_page_attention


class XlaPrefillPageAttention(KernelImpl):
    """Prefill over pages in plain JAX (page gathers + online softmax), any device."""

    # One page per step: many steps, ranges that start and end inside pages.
    test_configs: ClassVar[dict[str, OpConfig]] = {"page1": PrefillPageAttentionConfig(block_k=1)}

    def heuristic_cfg(self, args: PrefillPageAttentionArgs, device: DeviceInfo) -> PrefillPageAttentionConfig:
        return H.heuristic(args, device.platform)

    def candidate_cfgs(self, args: PrefillPageAttentionArgs, device: DeviceInfo) -> list[PrefillPageAttentionConfig]:
        return H.candidates(args, device.platform)

    def validate_cfg(self, cfg: PrefillPageAttentionConfig, args: PrefillPageAttentionArgs, device: DeviceInfo) -> None:
        if cfg.block_k is None:
            raise ValueError("xla prefill_page_attention needs block_k (cached tokens per step)")

    def run(self, args: PrefillPageAttentionArgs, cfg: PrefillPageAttentionConfig) -> jax.Array:
        return prefill_page_attention(args, H.pages_per_step(cfg, args))
