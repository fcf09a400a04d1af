"""The Triton ``flash_attention`` implementation: what it accepts, its configs, its entry point."""

from __future__ import annotations

import jax.numpy as jnp

from ejkernel.modules.attention import AttentionArgs
from ejkernel.modules.flash_attention import FlashAttentionConfig
from ejkernel.ops import DeviceInfo, KernelImpl, current_policy

from .._launch import availability
from . import heuristics as H

_DTYPES = ("float16", "bfloat16", "float32")
_MAX_HEAD_DIM = 256


class TritonFlashAttention(KernelImpl):
    """FlashAttention-2 forward and backward in Triton for NVIDIA GPUs (compute capability >= 8.0).

    It provides the log-sum-exp protocol (``supports_lse``), so ``ring_attention`` runs its blocks
    with these kernels on GPUs; it declines ``position_offset`` (the ring's sliding-window blocks),
    which then run on another implementation.
    """

    version = "1"
    device_requirement = "an NVIDIA GPU"
    supports_lse = True  # ring attention's per-block kernel on NVIDIA GPUs

    def decline(self, args: AttentionArgs, device: DeviceInfo) -> str | None:
        if device.compute_capability is None:  # a GPU without CUDA compute capability (ROCm)
            return f"needs an NVIDIA GPU; this call runs on {device.kind}"
        if device.compute_capability < (8, 0):
            return f"needs compute capability >= 8.0, this GPU has {device.compute_capability}"
        missing = availability()
        if missing:
            return missing
        dtype = jnp.dtype(args.dtype).name
        if dtype not in _DTYPES:
            return f"supports {', '.join(_DTYPES)} inputs, got {dtype}"
        if max(args.head_dim, args.value_head_dim) > _MAX_HEAD_DIM:
            return f"supports head dims up to {_MAX_HEAD_DIM}, got {args.head_dim} (value {args.value_head_dim})"
        if args.position_offset is not None:
            return "position_offset (the query positions of ring-attention window blocks) is not supported"
        if args.attention_mask is not None:
            return (
                "pairwise attention masks are not supported; express them as segment ids "
                "(MaskInfo.from_segments) or as an additive bias"
            )
        return None

    def _sizes(self, args: AttentionArgs) -> tuple[int, int, int]:
        return args.head_dim, args.value_head_dim, jnp.dtype(args.dtype).itemsize

    def heuristic_cfg(self, args: AttentionArgs, device: DeviceInfo) -> FlashAttentionConfig:
        d, dv, itemsize = self._sizes(args)
        cc = device.compute_capability
        tma = H.tma_eligible(args, cc)
        fwd = H.heuristic_fwd_tma(args) if tma else H.heuristic_fwd(d, dv, itemsize, cc, args.seq_k)
        return FlashAttentionConfig(fwd_params=fwd, bwd_params=H.heuristic_bwd(d, dv, itemsize, cc))

    def candidate_cfgs(self, args: AttentionArgs, device: DeviceInfo) -> list[FlashAttentionConfig]:
        d, dv, itemsize = self._sizes(args)
        cc = device.compute_capability
        base = self.heuristic_cfg(args, device)
        out = [
            FlashAttentionConfig(fwd_params=p, bwd_params=base.bwd_params)
            for p in H.fwd_candidates(d, dv, itemsize, cc)
        ]
        if current_policy().autotune_mode == "fwdbwd":  # only then is the backward timed
            out += [
                FlashAttentionConfig(fwd_params=base.fwd_params, bwd_params=p)
                for p in H.bwd_candidates(d, dv, itemsize, cc)
            ]
        return out

    def validate_cfg(self, cfg: FlashAttentionConfig, args: AttentionArgs, device: DeviceInfo) -> None:
        assert cfg.fwd_params is not None and cfg.bwd_params is not None
        H.check_params("fwd_params", cfg.fwd_params)
        H.check_params("bwd_params", cfg.bwd_params)
        d, dv, itemsize = self._sizes(args)
        limit = H.smem_limit(device.compute_capability)
        if H.fwd_smem(cfg.fwd_params, d, dv, itemsize) > limit:
            raise ValueError(
                f"triton flash_attention: fwd_params {cfg.fwd_params} need more than {limit} B of shared memory"
            )
        if H.bwd_smem(cfg.bwd_params, d, dv, itemsize) > limit:
            raise ValueError(
                f"triton flash_attention: bwd_params {cfg.bwd_params} need more than {limit} B of shared memory"
            )

    def run(self, args: AttentionArgs, cfg: FlashAttentionConfig):
        from ._call import flash_attention

        assert cfg.fwd_params is not None and cfg.bwd_params is not None
        return flash_attention(args, cfg.fwd_params, cfg.bwd_params)

    def forward_lse(self, args: AttentionArgs, cfg: FlashAttentionConfig):
        from ._call import forward_lse

        assert cfg.fwd_params is not None and cfg.bwd_params is not None
        return forward_lse(args, cfg.fwd_params, cfg.bwd_params)

    def backward_lse(self, args: AttentionArgs, cfg: FlashAttentionConfig, out, lse, dout):
        from ._call import backward_lse

        assert cfg.fwd_params is not None and cfg.bwd_params is not None
        return backward_lse(args, cfg.fwd_params, cfg.bwd_params, out, lse, dout)
