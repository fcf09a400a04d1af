"""The Triton ``flash_mla_decode`` implementation: what it declares, its configs, its entry point."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ejkernel.ops import DeviceInfo, KernelImpl, Need, OpConfig
from ejkernel.ops.flash_mla_decode import FlashMLADecodeArgs, FlashMLADecodeConfig

from .._launch import gpu_availability
from . import heuristics as H


class TritonFlashMLADecode(KernelImpl):
    """Paged latent decode in Triton for NVIDIA GPUs: split-K over the context, 16 to 64 query
    rows (heads × query tokens) per program sharing each latent tile, splits merged in XLA."""

    device_requirement = "an NVIDIA GPU"
    dtypes = ("float16", "bfloat16", "float32")
    # The float32 accumulator [block_h, kv_lora_rank] lives in registers: 1024 lanes at 16 rows.
    max_sizes: ClassVar[Mapping[str, int]] = {"head_dim": 1024}
    unsupported: ClassVar[Mapping[str, str]] = {
        "float32_wide_latent": "float32 with a latent row above 128 lanes needs more shared memory than a GPU block has"
    }
    # 16-row blocks, 16-token steps and 3 splits: several head blocks, steps and splits on the
    # small cases, page boundaries inside and between steps.
    test_configs: ClassVar[Mapping[str, OpConfig]] = {
        "h16-step16-split3": FlashMLADecodeConfig(block_h=16, block_n=16, num_splits=3, num_warps=4, num_stages=1)
    }

    def available(self, device: DeviceInfo) -> str | None:
        return gpu_availability(device)

    def heuristic_cfg(self, args: FlashMLADecodeArgs, device: DeviceInfo) -> FlashMLADecodeConfig:
        return H.config_of(H.heuristic(H.Shape.of(args), device.compute_capability))

    def candidate_cfgs(self, args: FlashMLADecodeArgs, device: DeviceInfo) -> list[FlashMLADecodeConfig]:
        return [H.config_of(t) for t in H.candidates(H.Shape.of(args), device.compute_capability)]

    def validate_cfg(self, cfg: FlashMLADecodeConfig, args: FlashMLADecodeArgs, device: DeviceInfo) -> None:
        H.check(H.tiles_of(cfg))

    def resources(self, cfg: FlashMLADecodeConfig, args: FlashMLADecodeArgs, device: DeviceInfo) -> list[Need]:
        return H.needs(H.Shape.of(args), H.tiles_of(cfg), device.compute_capability)

    def run(self, args: FlashMLADecodeArgs, cfg: FlashMLADecodeConfig) -> Any:
        from ._call import mla_decode

        out, lse = mla_decode(
            args.query, args.latent_cache, args.context_lens, args.block_tables,
            kv_lora_rank=args.kv_lora_rank, scale=args.softmax_scale, causal=args.causal, tiles=H.tiles_of(cfg),
        )  # fmt: skip
        return (out, lse) if args.return_lse else out
