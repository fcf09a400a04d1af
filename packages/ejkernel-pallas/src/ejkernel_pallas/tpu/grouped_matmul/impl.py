"""The Pallas TPU ``grouped_matmul`` implementation (megablox gmm/tgmm)."""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp

from ejkernel.ops import DeviceInfo, KernelImpl, OpConfig
from ejkernel.ops.grouped_matmul import GroupedMatmulArgs, GroupedMatmulConfig

from .._tiling import tpu_decline
from . import heuristics as H


class PallasTpuGroupedMatmul(KernelImpl):
    """Megablox's grouped GEMM on TPU (v4 and newer): ``gmm`` for the forward and ``dlhs``,
    ``tgmm`` for ``drhs``, over device-built group metadata (scalar prefetch)."""

    version = "1"
    device_requirement = "a TPU"
    dtypes: ClassVar[tuple[str, ...]] = ("float32", "bfloat16")
    unsupported: ClassVar[dict[str, str]] = {
        "rhs_scale": "rhs_scale is applied by the XLA and Triton implementations only",
        "rhs_scale_blocks": "blockwise rhs_scale is applied by the XLA implementation only",
    }
    # 16-row visits: several row tiles per group and tiles shared by two groups on the small cases.
    test_configs: ClassVar[dict[str, OpConfig]] = {
        "rows16": GroupedMatmulConfig(block_m=16, block_n=128, block_k=128, split_k=1)
    }

    def available(self, device: DeviceInfo) -> str | None:
        return tpu_decline(device)

    def heuristic_cfg(self, args: GroupedMatmulArgs, device: DeviceInfo) -> GroupedMatmulConfig:
        return H.heuristic(args.m, args.groups, args.dtype)

    def candidate_cfgs(self, args: GroupedMatmulArgs, device: DeviceInfo) -> list[GroupedMatmulConfig]:
        return H.candidates(args.m, args.groups, args.dtype)

    def validate_cfg(self, cfg: GroupedMatmulConfig, args: GroupedMatmulArgs, device: DeviceInfo) -> None:
        rows = H.sublane_rows(args.dtype)
        if cfg.block_m % rows:
            raise ValueError(
                f"pallas grouped_matmul: block_m must be a multiple of {rows} for {jnp.dtype(args.dtype).name}, "
                f"got {cfg.block_m}"
            )
        if cfg.split_k not in (None, 1):
            raise ValueError(f"pallas grouped_matmul: split_k must be 1, got {cfg.split_k}")

    def run(self, args: GroupedMatmulArgs, cfg: GroupedMatmulConfig) -> jax.Array:
        from ._call import grouped_matmul

        return grouped_matmul(args, cfg)
