"""The XLA ``ragged_decode_attention`` implementation: what it declares, its configs, its entry point."""

from __future__ import annotations

from typing import ClassVar

import jax

from ejkernel.ops import DeviceInfo, FwdParams, KernelImpl, OpConfig
from ejkernel.ops.ragged_decode_attention import RaggedDecodeAttentionArgs, RaggedDecodeAttentionConfig

from . import heuristics as H
from ._kernel import ragged_decode_attention


class XlaRaggedDecodeAttention(KernelImpl):
    """Ragged decode in plain JAX (online-softmax scan over KV blocks), any device."""

    # 8 tokens per step: many steps, ranges starting and ending inside blocks, a shifted last block.
    test_configs: ClassVar[dict[str, OpConfig]] = {
        "block8": RaggedDecodeAttentionConfig(fwd_params=FwdParams(kv_blocksize=8))
    }

    def heuristic_cfg(self, args: RaggedDecodeAttentionArgs, device: DeviceInfo) -> RaggedDecodeAttentionConfig:
        return H.heuristic(args)

    def candidate_cfgs(self, args: RaggedDecodeAttentionArgs, device: DeviceInfo) -> list[RaggedDecodeAttentionConfig]:
        return H.candidates(args)

    def validate_cfg(
        self, cfg: RaggedDecodeAttentionConfig, args: RaggedDecodeAttentionArgs, device: DeviceInfo
    ) -> None:
        if cfg.fwd_params is None or cfg.fwd_params.kv_blocksize is None:
            raise ValueError("xla ragged_decode_attention needs fwd_params.kv_blocksize (cached tokens per step)")
        if cfg.num_key_splits not in (None, 1):
            raise ValueError(
                f"xla ragged_decode_attention does not split the KV range (num_key_splits must be 1, "
                f"got {cfg.num_key_splits})"
            )

    def run(self, args: RaggedDecodeAttentionArgs, cfg: RaggedDecodeAttentionConfig) -> jax.Array:
        assert cfg.fwd_params is not None and cfg.fwd_params.kv_blocksize is not None
        return ragged_decode_attention(args, cfg.fwd_params.kv_blocksize)
