"""The Triton ``deepseek_attn`` implementation: what it declares, its configs, its entry point."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ejkernel.ops import DeviceInfo, KernelImpl, Need, OpConfig
from ejkernel.ops.deepseek_attn import DeepSeekAttnArgs, DeepSeekAttnConfig

from .._launch import gpu_availability
from . import heuristics as H


class TritonDeepSeekAttn(KernelImpl):
    """DeepSeek sparse attention for NVIDIA GPUs: the lightning indexer's scores and top-k in JAX
    (``jax.lax.top_k``, the selection shared with the XLA implementation; a Triton top-k is not
    worth it beside XLA's), the attention over each token's selected latent rows a Triton kernel
    (one program per token and block of 16 to 64 heads, gathered latent tiles, absorbed form),
    its backward the VJP of the same gathered attention in plain JAX (recomputed).

    Config: ``block_q`` heads per program, ``block_k`` selected keys per step."""

    device_requirement = "an NVIDIA GPU"
    dtypes = ("float16", "bfloat16", "float32")
    # The float32 accumulator [block_q heads, kv_lora_rank] lives in registers: 1024 lanes at 16 heads.
    max_sizes: ClassVar[Mapping[str, int]] = {"kv_lora_rank": 1024}
    unsupported: ClassVar[Mapping[str, str]] = {
        "float32_wide_latent": "float32 with a latent row above 128 lanes needs more shared memory than a GPU block has"
    }
    # 16 heads a program and 16 keys a step: several head blocks and key steps on the small cases.
    test_configs: ClassVar[Mapping[str, OpConfig]] = {
        "h16-k16": DeepSeekAttnConfig(block_q=16, block_k=16, num_warps=4, num_stages=1)
    }

    def available(self, device: DeviceInfo) -> str | None:
        return gpu_availability(device)

    def heuristic_cfg(self, args: DeepSeekAttnArgs, device: DeviceInfo) -> DeepSeekAttnConfig:
        return H.config_of(H.heuristic(H.shape_of(args), device.compute_capability))

    def candidate_cfgs(self, args: DeepSeekAttnArgs, device: DeviceInfo) -> list[DeepSeekAttnConfig]:
        return [H.config_of(t) for t in H.candidates(H.shape_of(args), device.compute_capability)]

    def validate_cfg(self, cfg: DeepSeekAttnConfig, args: DeepSeekAttnArgs, device: DeviceInfo) -> None:
        H.check(H.tiles_of(cfg))

    def resources(self, cfg: DeepSeekAttnConfig, args: DeepSeekAttnArgs, device: DeviceInfo) -> list[Need]:
        """The kernel's shared memory: the resident query tile, the gathered latent tiles in
        flight with their indices and the probabilities' tile (``flash_mla_decode``'s model)."""
        return H.needs(H.shape_of(args), H.tiles_of(cfg), device.compute_capability)

    def run(self, args: DeepSeekAttnArgs, cfg: DeepSeekAttnConfig) -> Any:
        from ._call import deepseek_attn

        return deepseek_attn(args, H.tiles_of(cfg))
