"""The Triton ``grouped_matmul`` implementation: what it declares, its configs, its entry point."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import jax
import jax.numpy as jnp

from ejkernel.ops import DeviceInfo, KernelImpl, Need, OpConfig
from ejkernel.ops.grouped_matmul import GroupedMatmulArgs, GroupedMatmulConfig

from .._launch import gpu_availability
from . import heuristics as H


class TritonGroupedMatmul(KernelImpl):
    """The grouped GEMM (forward, ``dlhs``, ``drhs``) in Triton for NVIDIA GPUs (compute
    capability >= 8.0): a tile schedule over the groups computed by each program (``_kernel.schedule``), ``tl.dot``
    with a float32 accumulator."""

    version = "1"
    device_requirement = "an NVIDIA GPU"
    dtypes = ("float16", "bfloat16", "float32")
    unsupported: ClassVar[Mapping[str, str]] = {
        "rhs_scale_blocks": "a scale per block of k is applied by the XLA implementation (one block: here too)",
    }
    # Small tiles and a split drhs reduction: several tiles per group on the small cases; drhs
    # with its own pipeline depth.
    test_configs: ClassVar[Mapping[str, OpConfig]] = {
        "tiles32-split2-persistent": GroupedMatmulConfig(
            block_m=32, block_n=32, block_k=16, num_warps=4, num_stages=2, tgmm_num_stages=3, split_k=2, persistent=True
        )
    }

    def available(self, device: DeviceInfo) -> str | None:
        return gpu_availability(device)

    def _shape(self, a: GroupedMatmulArgs) -> tuple[int, int, int, int, int]:
        return a.m, a.k, a.n, a.groups, jnp.dtype(a.dtype).itemsize

    @staticmethod
    def _out_itemsize(a: GroupedMatmulArgs) -> int:
        return jnp.dtype(a.preferred_element_type).itemsize

    def heuristic_cfg(self, args: GroupedMatmulArgs, device: DeviceInfo) -> GroupedMatmulConfig:
        return H.heuristic(*self._shape(args), device.compute_capability, self._out_itemsize(args))

    def candidate_cfgs(self, args: GroupedMatmulArgs, device: DeviceInfo) -> list[GroupedMatmulConfig]:
        return H.candidates(*self._shape(args), device.compute_capability, self._out_itemsize(args))

    def resources(self, cfg: GroupedMatmulConfig, args: GroupedMatmulArgs, device: DeviceInfo) -> list[Need]:
        return H.needs(cfg, jnp.dtype(args.dtype).itemsize, self._out_itemsize(args))

    def validate_cfg(self, cfg: GroupedMatmulConfig, args: GroupedMatmulArgs, device: DeviceInfo) -> None:
        for name in ("block_m", "block_n", "block_k"):
            if getattr(cfg, name) < 16:
                raise ValueError(f"triton grouped_matmul: {name} must be >= 16 (tl.dot), got {getattr(cfg, name)}")

    def run(self, args: GroupedMatmulArgs, cfg: GroupedMatmulConfig) -> jax.Array:
        from ._call import grouped_matmul

        return grouped_matmul(args, cfg)
