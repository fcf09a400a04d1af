"""The Pallas TPU ``flash_attention`` implementation: what it accepts, its configs, its entry."""

from __future__ import annotations

import jax.numpy as jnp

from ejkernel.modules.attention import AttentionArgs
from ejkernel.modules.flash_attention import FlashAttentionConfig
from ejkernel.ops import DeviceInfo, KernelImpl, current_policy

from .._tiling import VMEM_BUDGET, tpu_decline
from . import heuristics as H

_DTYPES = ("float32", "bfloat16")
_MAX_HEAD_DIM = 256

# Decline reasons (documented in the package README and asserted by its tests).
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


class PallasTpuFlashAttention(KernelImpl):
    """FlashAttention-2 forward and backward as Mosaic TPU Pallas kernels (TPU v4 and newer).

    Supports causal, sliding windows, segment ids, GQA/MQA, logits soft cap, attention sinks and a
    value head dim different from the query's; declines bias, dropout, varlen, pairwise masks
    and ring attention's ``position_offset``.
    """

    version = "1"
    device_requirement = "a TPU"

    def decline(self, args: AttentionArgs, device: DeviceInfo) -> str | None:
        reason = tpu_decline(device)
        if reason is not None:
            return reason
        dtype = jnp.dtype(args.dtype).name
        if dtype not in _DTYPES:
            return f"supports {' and '.join(_DTYPES)} inputs (TPUs have no fast float16 path), got {dtype}"
        if max(args.head_dim, args.value_head_dim) > _MAX_HEAD_DIM:
            return f"supports head dims up to {_MAX_HEAD_DIM}, got {args.head_dim} (value {args.value_head_dim})"
        if args.bias is not None:
            return NO_BIAS
        if args.dropout_prob > 0:
            return NO_DROPOUT
        if args.is_varlen:
            return NO_VARLEN
        if args.attention_mask is not None:
            return NO_PAIRWISE
        if args.position_offset is not None:  # set only by ring attention
            return NO_POSITION_OFFSET
        return None

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
