"""The XLA ``grouped_matmul`` implementation."""

from __future__ import annotations

import jax

from ejkernel.ops import DeviceInfo, KernelImpl
from ejkernel.ops.grouped_matmul import GroupedMatmulArgs, GroupedMatmulConfig

from ._kernel import grouped_matmul


class XlaGroupedMatmul(KernelImpl):
    """``jax.lax.ragged_dot``, any device. XLA chooses its own tiling: the config is not read."""

    version = "1"

    def heuristic_cfg(self, args: GroupedMatmulArgs, device: DeviceInfo) -> GroupedMatmulConfig:
        return GroupedMatmulConfig()

    def run(self, args: GroupedMatmulArgs, cfg: GroupedMatmulConfig) -> jax.Array:
        return grouped_matmul(args)
