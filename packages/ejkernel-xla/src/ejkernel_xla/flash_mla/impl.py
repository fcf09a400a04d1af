"""The XLA ``flash_mla`` implementation: the absorbed form on the blockwise flash attention, or
the non-absorbed form where it costs fewer FLOPs (prefill).

Absorbed: the nope part of each query is absorbed into the latent space (``q_nope @ w_kcᵀ``),
every head attends the one latent ``[c | k_rope]`` as a single kv head (values: the latent
``c``), and each head's latent output is projected by ``w_vc``
(:mod:`ejkernel.ops.families.latent_attention`). Non-absorbed, where ``materialize_pays`` (many
queries per key): keys and values materialized per head (``c @ w_kc``, ``c @ w_vc``) and
attended as dense attention. The attention in between is this backend's
FlashAttention-2 loops (``ejkernel_xla.flash_attention._kernel``), whose custom VJP recomputes
probabilities tile by tile: forward and backward stay linear in the sequence length, and autodiff
carries the gradients through the two projections.
"""

from __future__ import annotations

from typing import ClassVar

import jax

from ejkernel.ops import DeviceInfo, KernelImpl, OpConfig
from ejkernel.ops.families.latent_attention import (
    LatentAttentionArgs,
    absorbed_attention_args,
    materialize_pays,
    materialized_attention_args,
    project_latent_output,
)
from ejkernel.ops.flash_mla import FlashMLAConfig

from ..flash_attention._kernel import flash_attention


def latent_attention(
    args: LatentAttentionArgs, block_q: int, block_k: int, attention_mask=None, *, form: str | None = None
) -> jax.Array:
    """``args`` with ``(block_q, block_k)`` tiles of the absorbed problem, forward and backward;
    ``attention_mask`` (bool, broadcast 4-D) restricts the keys further (``deepseek_attn``).
    ``form``: ``"absorbed"``, ``"materialized"`` or ``None`` (``materialize_pays`` chooses). The
    materialized form's tiles hold as many query rows as the absorbed tile does (``block_q`` ×
    heads, all heads sharing its one kv head) per kv head."""
    if form == "materialized" or (form is None and materialize_pays(args)):
        bq = block_q * args.num_heads
        attn = materialized_attention_args(args, attention_mask)
        return flash_attention(attn, (bq, block_k), (bq, block_k)).astype(args.query.dtype)
    attn = absorbed_attention_args(args, attention_mask)
    out_latent = flash_attention(attn, (block_q, block_k), (block_q, block_k))
    return project_latent_output(args, out_latent)


def heuristic_blocks(args: LatentAttentionArgs, device: DeviceInfo) -> tuple[int, int]:
    """Tiles of the absorbed problem. All heads share the one latent, so a query tile holds
    ``num_heads × block_q`` rows: ``block_q`` is sized for the row count the dense flash
    attention's heuristic uses per (kv head) tile, 256 on CPU and 1024 on accelerators, where
    larger loop steps amortize each step's launches."""
    masked = args.causal or args.sliding_window is not None or args.cu_seqlens is not None
    rows, bk = (256, 256 if masked else 512) if device.platform == "cpu" else (1024, 1024)
    bq = max(8, 1 << max(0, (rows // args.num_heads).bit_length() - 1))
    return bq, bk


class XlaFlashMLA(KernelImpl):
    """Absorbed multi-head latent attention in plain JAX (blockwise), every feature, any device."""

    version = "1"
    # Small tiles: several query and key steps, partial last tiles, on the small test inputs.
    test_configs: ClassVar[dict[str, OpConfig]] = {"tiles8x16": FlashMLAConfig(block_q=8, block_k=16)}

    def heuristic_cfg(self, args: LatentAttentionArgs, device: DeviceInfo) -> FlashMLAConfig:
        bq, bk = heuristic_blocks(args, device)
        return FlashMLAConfig(block_q=bq, block_k=bk)

    def candidate_cfgs(self, args: LatentAttentionArgs, device: DeviceInfo) -> list[FlashMLAConfig]:
        return [FlashMLAConfig(block_q=bq, block_k=bk) for bq in (128, 256, 512) for bk in (256, 512, 1024)]

    def validate_cfg(self, cfg: FlashMLAConfig, args: LatentAttentionArgs, device: DeviceInfo) -> None:
        if cfg.block_q is None or cfg.block_k is None:
            raise ValueError("xla flash_mla needs block_q and block_k")

    def run(self, args: LatentAttentionArgs, cfg: FlashMLAConfig) -> jax.Array:
        assert cfg.block_q is not None and cfg.block_k is not None
        return latent_attention(args, cfg.block_q, cfg.block_k)
