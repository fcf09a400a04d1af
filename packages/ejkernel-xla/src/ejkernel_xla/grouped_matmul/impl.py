"""The XLA ``grouped_matmul`` implementation."""

from __future__ import annotations

from typing import ClassVar

import jax

from ejkernel.ops import DeviceInfo, KernelImpl, OpConfig
from ejkernel.ops.grouped_matmul import GroupedMatmulArgs, GroupedMatmulConfig

from . import heuristics as H
from ._kernel import grouped_matmul


class XlaGroupedMatmul(KernelImpl):
    """Any device: the tiled form (a loop over chunks of ``block_m`` rows of one group) where
    ``block_m`` is set, ``jax.lax.ragged_dot`` where it is ``None``. The heuristic sets it on the
    CPU (:func:`~ejkernel_xla.grouped_matmul.heuristics.tiled_pays`); the other fields are not read."""

    version = "2"
    # 8-row chunks: several per group, partial last chunks, windows moved back at the last row.
    test_configs: ClassVar[dict[str, OpConfig]] = {"rows8": GroupedMatmulConfig(block_m=8)}

    def heuristic_cfg(self, args: GroupedMatmulArgs, device: DeviceInfo) -> GroupedMatmulConfig:
        return H.heuristic(args, device.platform)

    def run(self, args: GroupedMatmulArgs, cfg: GroupedMatmulConfig) -> jax.Array:
        return grouped_matmul(args, cfg.block_m)
