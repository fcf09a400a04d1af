"""The Pallas TPU ``flash_attention`` implementation: what it declares, its configs, its entry."""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp

from ejkernel.ops import BwdParams, DeviceInfo, FwdParams, OpConfig, current_policy
from ejkernel.ops.families.attention import AttentionArgs, AttentionImpl
from ejkernel.ops.flash_attention import FlashAttentionConfig

from .._tiling import VMEM_BUDGET, tpu_decline
from . import heuristics as H

# Decline reasons of the unsupported features (documented in the package README, asserted by the
# conformance suite from the declaration below).
NO_BIAS = (
    "an additive bias is not supported; express masks as segment ids (MaskInfo.from_segments) or use platform='xla'"
)
NO_DROPOUT = "dropout is not supported; use platform='xla' for attention dropout"
NO_VARLEN = (
    "cum_seqlens_q/k (varlen packing) is not supported; pack sequences with segment ids "
    "(MaskInfo.from_segments) instead"
)
NO_POSITION_OFFSET = (
    "a position_offset (ring-attention steps) is not supported: block ranges are planned from static positions"
)
NO_PAIRWISE = (
    "pairwise attention masks are not supported; express them as segment ids (MaskInfo.from_segments) "
    "or use platform='xla'"
)


class PallasTpuFlashAttention(AttentionImpl):
    """FlashAttention-2 forward and backward as Mosaic TPU Pallas kernels (TPU v4 and newer).

    Supports causal, sliding windows, segment ids, GQA/MQA, logits soft cap, attention sinks and a
    value head dim different from the query's; declares bias, dropout, varlen, pairwise masks and
    ring attention's ``position_offset`` unsupported. It does not provide the log-sum-exp
    protocol (``supports_lse = False``), so it is no inner kernel of ``ring_attention``.
    """

    version = "1"
    device_requirement = "a TPU"
    # No float16: TPUs have no fast float16 path (bfloat16 is their 16-bit type).
    dtypes: ClassVar[tuple[str, ...]] = ("float32", "bfloat16")
    # Head dims above 128 that are not a multiple of 128 are zero-padded to one (_spec.kernel_head_dim).
    max_sizes: ClassVar[dict[str, int]] = {"head_dim": 256, "value_head_dim": 256}
    unsupported: ClassVar[dict[str, str]] = {
        "bias": NO_BIAS,
        "dropout": NO_DROPOUT,
        "varlen": NO_VARLEN,
        "attention_mask": NO_PAIRWISE,
        "position_offset": NO_POSITION_OFFSET,  # set only by ring attention
    }
    # TPU tiling: 16-row query blocks, 128-key blocks (the smallest the lane dimension allows),
    # different forward and backward: several blocks per sequence on the small conformance cases.
    test_configs: ClassVar[dict[str, OpConfig]] = {
        "tiles16x128-bwd32x128": FlashAttentionConfig(
            fwd_params=FwdParams(q_blocksize=16, kv_blocksize=128),
            bwd_params=BwdParams(q_blocksize=32, kv_blocksize=128),
        )
    }

    def available(self, device: DeviceInfo) -> str | None:
        return tpu_decline(device)

    def _shape(self, args: AttentionArgs) -> tuple:
        return (args.seq_q, args.seq_k, args.head_dim, args.value_head_dim, args.dtype, args.has_segments)

    def heuristic_cfg(self, args: AttentionArgs, device: DeviceInfo) -> FlashAttentionConfig:
        shape = self._shape(args)
        return FlashAttentionConfig(fwd_params=H.heuristic_fwd(*shape), bwd_params=H.heuristic_bwd(*shape))

    def candidate_cfgs(self, args: AttentionArgs, device: DeviceInfo) -> list[FlashAttentionConfig]:
        shape = self._shape(args)
        base = self.heuristic_cfg(args, device)
        out = [FlashAttentionConfig(fwd_params=p, bwd_params=base.bwd_params) for p in H.fwd_candidates(*shape)]
        if current_policy().autotune_mode == "fwdbwd":  # only then is the backward timed
            out += [FlashAttentionConfig(fwd_params=base.fwd_params, bwd_params=p) for p in H.bwd_candidates(*shape)]
        return out

    def validate_cfg(self, cfg: FlashAttentionConfig, args: AttentionArgs, device: DeviceInfo) -> None:
        itemsize = jnp.dtype(args.dtype).itemsize
        for name, params, vmem in (
            ("fwd_params", cfg.fwd_params, H.fwd_vmem_bytes),
            ("bwd_params", cfg.bwd_params, H.bwd_vmem_bytes),
        ):
            bq, bk = H.effective_blocks(*H.check_blocks(name, params, args.dtype), args.seq_q, args.seq_k, args.dtype)
            need = vmem(bq, bk, args.head_dim, args.value_head_dim, itemsize, args.has_segments)
            if need > VMEM_BUDGET:
                raise ValueError(
                    f"pallas flash_attention: {name} {bq}x{bk} needs about {need >> 20} MiB of VMEM, more than the "
                    f"{VMEM_BUDGET >> 20} MiB budget"
                )

    def run(self, args: AttentionArgs, cfg: FlashAttentionConfig):
        from ._call import flash_attention

        assert cfg.fwd_params is not None and cfg.bwd_params is not None
        return flash_attention(args, cfg.fwd_params, cfg.bwd_params)
