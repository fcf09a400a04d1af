"""The Triton ``flash_attention`` implementation: what it declares, its configs, its entry points."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import jax.numpy as jnp

from ejkernel.ops import BwdParams, DeviceInfo, FwdParams, Need, OpConfig, current_policy
from ejkernel.ops.families.attention import AttentionArgs, AttentionImpl
from ejkernel.ops.flash_attention import FlashAttentionConfig

from .._launch import gpu_availability
from . import heuristics as H


class TritonFlashAttention(AttentionImpl):
    """FlashAttention-2 forward and backward in Triton for NVIDIA GPUs (compute capability >= 8.0).

    It provides the log-sum-exp protocol (``supports_lse``), so ``ring_attention`` runs its blocks
    with these kernels on GPUs; it does not support ``position_offset`` (the ring's sliding-window
    blocks), which then run on another implementation.
    """

    version = "1"
    device_requirement = "an NVIDIA GPU"
    supports_lse = True  # ring attention's per-block kernel on NVIDIA GPUs
    dtypes = ("float16", "bfloat16", "float32")
    max_sizes: ClassVar[Mapping[str, int]] = {"head_dim": 256, "value_head_dim": 256}
    unsupported: ClassVar[Mapping[str, str]] = {
        "attention_mask": (
            "pairwise attention masks are not supported; express them as segment ids "
            "(MaskInfo.from_segments) or as an additive bias"
        ),
        "position_offset": "position_offset (the query positions of ring-attention window blocks) is not supported",
    }
    # Small tiles, a backward tiled differently from the forward: several blocks on small inputs.
    test_configs: ClassVar[Mapping[str, OpConfig]] = {
        "tiles32x32-bwd16x32": FlashAttentionConfig(
            fwd_params=FwdParams(q_blocksize=32, kv_blocksize=32, num_warps=4, num_stages=2),
            bwd_params=BwdParams(q_blocksize=16, kv_blocksize=32, num_warps=4, num_stages=2),
        )
    }

    def available(self, device: DeviceInfo) -> str | None:
        return gpu_availability(device)

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

    def resources(self, cfg: FlashAttentionConfig, args: AttentionArgs, device: DeviceInfo) -> list[Need]:
        assert cfg.fwd_params is not None and cfg.bwd_params is not None
        return H.needs(args, cfg.fwd_params, cfg.bwd_params, device.compute_capability)

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
