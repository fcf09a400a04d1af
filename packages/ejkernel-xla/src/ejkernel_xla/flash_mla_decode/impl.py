"""The XLA ``flash_mla_decode`` implementation: what it declares, its configs, its entry point."""

from __future__ import annotations

from typing import Any, ClassVar

from ejkernel.ops import DeviceInfo, KernelImpl, OpConfig
from ejkernel.ops.flash_mla_decode import FlashMLADecodeArgs, FlashMLADecodeConfig

from . import heuristics as H
from ._kernel import flash_mla_decode


class XlaFlashMLADecode(KernelImpl):
    """Paged latent decode in plain JAX (chunked page gathers + online softmax), any device."""

    # 16 tokens per step: many steps, page boundaries inside and between steps.
    test_configs: ClassVar[dict[str, OpConfig]] = {"step16": FlashMLADecodeConfig(block_n=16)}

    def heuristic_cfg(self, args: FlashMLADecodeArgs, device: DeviceInfo) -> FlashMLADecodeConfig:
        return H.heuristic(args)

    def candidate_cfgs(self, args: FlashMLADecodeArgs, device: DeviceInfo) -> list[FlashMLADecodeConfig]:
        return H.candidates(args)

    def validate_cfg(self, cfg: FlashMLADecodeConfig, args: FlashMLADecodeArgs, device: DeviceInfo) -> None:
        if cfg.block_n is None:
            raise ValueError("xla flash_mla_decode needs block_n (cached tokens per step)")
        if cfg.num_splits not in (None, 1):
            raise ValueError(
                f"xla flash_mla_decode does not split the context (num_splits must be 1, got {cfg.num_splits})"
            )

    def run(self, args: FlashMLADecodeArgs, cfg: FlashMLADecodeConfig) -> Any:
        assert cfg.block_n is not None
        return flash_mla_decode(args, cfg.block_n)
