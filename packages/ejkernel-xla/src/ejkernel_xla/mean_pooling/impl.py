"""The XLA ``mean_pooling`` implementation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import jax

from ejkernel.ops import DeviceInfo, KernelImpl, OpConfig
from ejkernel.ops.mean_pooling import MeanPoolingArgs, MeanPoolingConfig

from . import heuristics as H
from ._kernel import mean_pooling


class XlaMeanPooling(KernelImpl):
    """Mean pooling in plain JAX (reduction, segment sum or per-item sums in float32), any device."""

    # Packed rows summed item by item (the accelerators' formulation) on the CPU too: sequences
    # cut into several items, the items' padding rows.
    test_configs: ClassVar[Mapping[str, OpConfig]] = {"items-split8": MeanPoolingConfig(split_size=8)}

    def heuristic_cfg(self, args: MeanPoolingArgs, device: DeviceInfo) -> MeanPoolingConfig:
        return H.heuristic(args, device)

    def candidate_cfgs(self, args: MeanPoolingArgs, device: DeviceInfo) -> list[MeanPoolingConfig]:
        """Both formulations of packed rows, the device's choice first."""
        if args.cu_seqlens is None:
            return [MeanPoolingConfig()]
        both = [MeanPoolingConfig(split_size=H.split_size(args)), MeanPoolingConfig()]
        return sorted(both, key=lambda c: c != H.heuristic(args, device))

    def run(self, args: MeanPoolingArgs, cfg: MeanPoolingConfig) -> jax.Array:
        return mean_pooling(args, cfg.split_size)
