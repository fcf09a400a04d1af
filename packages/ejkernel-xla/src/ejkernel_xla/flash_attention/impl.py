"""The XLA ``flash_attention`` implementation: what it declares, its configs, its entry points."""

from __future__ import annotations

from typing import ClassVar

from ejkernel.ops import BwdParams, DeviceInfo, FwdParams, OpConfig
from ejkernel.ops.families.attention import AttentionArgs, AttentionImpl
from ejkernel.ops.flash_attention import FlashAttentionConfig

from . import heuristics as H
from ._kernel import backward_from_lse, flash_attention, forward_with_lse


class XlaFlashAttention(AttentionImpl):
    """Blockwise FlashAttention-2 in plain JAX: every feature, any device.

    It provides the log-sum-exp protocol (``supports_lse``; ring attention's inner kernel) and
    honours ``AttentionArgs.position_offset`` (through ``key_bounds``).
    """

    version = "1"
    supports_lse = True
    # Many small tiles, different forward and backward: the tiling logic on small test inputs.
    test_configs: ClassVar[dict[str, OpConfig]] = {
        "tiles16x32-bwd32x8": FlashAttentionConfig(
            fwd_params=FwdParams(q_blocksize=16, kv_blocksize=32), bwd_params=BwdParams(q_blocksize=32, kv_blocksize=8)
        )
    }

    def heuristic_cfg(self, args: AttentionArgs, device: DeviceInfo) -> FlashAttentionConfig:
        return H.heuristic(args, device.platform)

    def candidate_cfgs(self, args: AttentionArgs, device: DeviceInfo) -> list[FlashAttentionConfig]:
        return H.candidates(args)

    def validate_cfg(self, cfg: FlashAttentionConfig, args: AttentionArgs, device: DeviceInfo) -> None:
        for name, params in (("fwd_params", cfg.fwd_params), ("bwd_params", cfg.bwd_params)):
            if params is None or params.q_blocksize is None or params.kv_blocksize is None:
                raise ValueError(f"xla flash_attention needs {name} with q_blocksize and kv_blocksize")

    @staticmethod
    def _blocks(params) -> tuple[int, int]:
        return params.q_blocksize, params.kv_blocksize

    def run(self, args: AttentionArgs, cfg: FlashAttentionConfig):
        return flash_attention(args, self._blocks(cfg.fwd_params), self._blocks(cfg.bwd_params))

    def forward_lse(self, args: AttentionArgs, cfg: FlashAttentionConfig):
        return forward_with_lse(args, self._blocks(cfg.fwd_params))

    def backward_lse(self, args: AttentionArgs, cfg: FlashAttentionConfig, out, lse, dout):
        return backward_from_lse(args, self._blocks(cfg.bwd_params), out, lse, dout)
