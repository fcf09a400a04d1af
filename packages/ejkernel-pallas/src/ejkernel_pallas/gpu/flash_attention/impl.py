"""The Mosaic GPU ``flash_attention`` implementation (NVIDIA Hopper): what it declares, its configs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ejkernel.ops import BwdParams, DeviceInfo, FwdParams, OpConfig, SizeRule
from ejkernel.ops.families.attention import AttentionArgs, AttentionImpl
from ejkernel.ops.flash_attention import FlashAttentionConfig

from . import heuristics as H

_MASKS = "express them as causal or run platform='triton', which takes them"


class PallasGpuFlashAttention(AttentionImpl):
    """FlashAttention forward and backward as Mosaic GPU kernels for Hopper (sm_90): TMA copies
    fed by a producer warpgroup, ``wgmma`` products (``_fwd``, ``_bwd``).

    Supports causal masks (aligned bottom-right), GQA/MQA, a logits soft cap, any lengths (padded
    to the tiles) and head dims 64 and 128, in bfloat16 and float16; declares the rest unsupported.
    """

    version = "1"
    device_requirement = "an NVIDIA Hopper GPU (sm_90)"
    dtypes: ClassVar[tuple[str, ...]] = ("bfloat16", "float16")
    allowed_sizes: ClassVar[Mapping[str, Any]] = {
        # d 256 would need more than Hopper's 227 KiB for the dK/dV kernel's resident and staged tiles.
        "head_dim": SizeRule("64 or 128", lambda n: n in (64, 128)),
    }
    unsupported: ClassVar[Mapping[str, str]] = {
        "value_head_dim": "the value head dim must equal the query's (the kernels share one head-dim tile)",
        "bias": f"an additive bias is not supported; {_MASKS}",
        "segment_ids": f"segment ids are not supported; {_MASKS}",
        "attention_mask": f"pairwise masks are not supported; {_MASKS}",
        "sliding_window": "sliding windows are not supported; run platform='triton', which takes them",
        "softmax_aux": "attention sinks (softmax_aux) are not supported; run platform='triton', which takes them",
        "dropout": "dropout is not supported; use platform='xla' for attention dropout",
        "varlen": "packed sequences (cum_seqlens_q/k) are not supported; run platform='triton', which takes them",
        "position_offset": "position_offset (ring attention's blocks) is not supported",
    }
    # The smallest tiles: several key tiles, both kinds of query tile and several stages' refills
    # on the conformance cases' short sequences.
    test_configs: ClassVar[dict[str, OpConfig]] = {
        "tiles64x64-bwd64x64": FlashAttentionConfig(
            fwd_params=FwdParams(q_blocksize=64, kv_blocksize=64, num_stages=2),
            bwd_params=BwdParams(q_blocksize=64, kv_blocksize=64, num_stages=2),
        )
    }

    def available(self, device: DeviceInfo) -> str | None:
        if device.platform != "gpu" or device.compute_capability is None:
            return f"needs an NVIDIA Hopper GPU (sm_90); this call runs on {device.platform} ({device.kind})"
        if device.compute_capability != (9, 0):
            return f"the Mosaic GPU kernels use Hopper's wgmma (sm_90); this GPU is sm_{''.join(map(str, device.compute_capability))}"
        return None

    def heuristic_cfg(self, args: AttentionArgs, device: DeviceInfo) -> FlashAttentionConfig:
        return FlashAttentionConfig(
            fwd_params=H.heuristic_fwd(args.head_dim), bwd_params=H.heuristic_bwd(args.head_dim)
        )

    def candidate_cfgs(self, args: AttentionArgs, device: DeviceInfo) -> list[FlashAttentionConfig]:
        base = self.heuristic_cfg(args, device)
        out = []
        for bk in (64, 128):
            for stages in (2, 3):
                p = FwdParams(q_blocksize=64, kv_blocksize=bk, num_stages=stages)
                if H.fwd_smem(p, args.head_dim) <= H.SMEM_LIMIT:
                    out.append(FlashAttentionConfig(fwd_params=p, bwd_params=base.bwd_params))
        return out

    def validate_cfg(self, cfg: FlashAttentionConfig, args: AttentionArgs, device: DeviceInfo) -> None:
        H.check_params("fwd_params", cfg.fwd_params, args.head_dim)
        H.check_params("bwd_params", cfg.bwd_params, args.head_dim)

    def run(self, args: AttentionArgs, cfg: FlashAttentionConfig):
        from .. import interpreting
        from ._call import attention, specs_for

        f, b = cfg.fwd_params, cfg.bwd_params
        specs = specs_for(
            args.query, args.key,
            causal=args.causal, scale=float(args.softmax_scale), soft_cap=args.logits_soft_cap,
            fwd=(f.q_blocksize, f.kv_blocksize, f.num_stages), bwd=(b.q_blocksize, b.kv_blocksize, b.num_stages),
            interpret=interpreting(),
        )  # fmt: skip
        return attention(args.query, args.key, args.value, specs)
