"""The XLA ``deepseek_attn`` implementation: the lightning indexer's kept-key mask
(:func:`~ejkernel.ops.families.latent_attention.index_mask`, one bool per query-key pair),
then ``flash_mla``'s absorbed blockwise attention under that mask (forward and backward; the
selection carries no gradient)."""

from __future__ import annotations

from typing import ClassVar

import jax

from ejkernel.ops import DeviceInfo, KernelImpl, OpConfig
from ejkernel.ops.deepseek_attn import DeepSeekAttnArgs, DeepSeekAttnConfig
from ejkernel.ops.families.latent_attention import index_mask

from ..flash_mla.impl import heuristic_blocks, latent_attention


class XlaDeepSeekAttn(KernelImpl):
    """DeepSeek sparse attention in plain JAX: dense indexer scores and top-k, blockwise absorbed
    latent attention over the kept keys; any device."""

    version = "1"
    test_configs: ClassVar[dict[str, OpConfig]] = {"tiles8x16": DeepSeekAttnConfig(block_q=8, block_k=16)}

    def heuristic_cfg(self, args: DeepSeekAttnArgs, device: DeviceInfo) -> DeepSeekAttnConfig:
        bq, bk = heuristic_blocks(args, device)
        return DeepSeekAttnConfig(block_q=bq, block_k=bk)

    def candidate_cfgs(self, args: DeepSeekAttnArgs, device: DeviceInfo) -> list[DeepSeekAttnConfig]:
        return [DeepSeekAttnConfig(block_q=bq, block_k=bk) for bq in (128, 256, 512) for bk in (256, 512, 1024)]

    def validate_cfg(self, cfg: DeepSeekAttnConfig, args: DeepSeekAttnArgs, device: DeviceInfo) -> None:
        if cfg.block_q is None or cfg.block_k is None:
            raise ValueError("xla deepseek_attn needs block_q and block_k")

    def run(self, args: DeepSeekAttnArgs, cfg: DeepSeekAttnConfig) -> jax.Array:
        assert cfg.block_q is not None and cfg.block_k is not None
        mask = index_mask(
            args.query_index,
            args.key_index,
            args.index_weights,
            topk=args.index_topk,
            scale=args.index_softmax_scale,
            causal=args.causal,
        )
        return latent_attention(args, cfg.block_q, cfg.block_k, attention_mask=mask)
