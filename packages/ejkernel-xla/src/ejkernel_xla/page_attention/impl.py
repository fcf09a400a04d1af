"""The XLA ``page_attention`` implementation: what it declares, its configs, its entry point."""

from __future__ import annotations

from typing import ClassVar

import jax

from ejkernel.ops import DeviceInfo, KernelImpl, OpConfig
from ejkernel.ops.page_attention import PageAttentionArgs, PageAttentionConfig

from . import heuristics as H
from ._kernel import page_attention


class XlaPageAttention(KernelImpl):
    """Paged decode in plain JAX (chunked page gathers + online softmax), any device."""

    version = "2"
    # 8 tokens per step: many steps, partial pages at the ends of ragged contexts.
    test_configs: ClassVar[dict[str, OpConfig]] = {"step8tokens": PageAttentionConfig(tokens_per_block=8)}

    def heuristic_cfg(self, args: PageAttentionArgs, device: DeviceInfo) -> PageAttentionConfig:
        return H.heuristic(args)

    def candidate_cfgs(self, args: PageAttentionArgs, device: DeviceInfo) -> list[PageAttentionConfig]:
        return H.candidates(args)

    def validate_cfg(self, cfg: PageAttentionConfig, args: PageAttentionArgs, device: DeviceInfo) -> None:
        if cfg.tokens_per_block is None:
            raise ValueError("xla page_attention needs tokens_per_block (cached tokens per step)")
        if cfg.num_splits not in (None, 1):
            raise ValueError(
                f"xla page_attention does not split the context (num_splits must be 1, got {cfg.num_splits})"
            )

    def run(self, args: PageAttentionArgs, cfg: PageAttentionConfig) -> jax.Array:
        assert cfg.tokens_per_block is not None
        return page_attention(args, cfg.tokens_per_block)
