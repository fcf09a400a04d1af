"""The Triton ``mean_pooling`` implementation: what it declares, its configs, its entry point."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import jax

from ejkernel.ops import DeviceInfo, KernelImpl, Need, OpConfig
from ejkernel.ops.mean_pooling import MeanPoolingArgs, MeanPoolingConfig

from .._launch import gpu_availability
from . import heuristics as H


class TritonMeanPooling(KernelImpl):
    """Split-row mean pooling in Triton (float32 partial sums, deterministic second pass) with a
    broadcast backward, for NVIDIA GPUs."""

    device_requirement = "an NVIDIA GPU"
    dtypes = ("float16", "bfloat16", "float32")
    # Small tiles and splits: long sequences cut into several items, ragged column tails.
    test_configs: ClassVar[Mapping[str, OpConfig]] = {
        "t8-d16-split16": MeanPoolingConfig(block_size=8, block_dim=16, split_size=16, num_warps=4, num_stages=1)
    }

    def available(self, device: DeviceInfo) -> str | None:
        return gpu_availability(device, min_cc=None)

    def heuristic_cfg(self, args: MeanPoolingArgs, device: DeviceInfo) -> MeanPoolingConfig:
        return H.heuristic(args)

    def candidate_cfgs(self, args: MeanPoolingArgs, device: DeviceInfo) -> list[MeanPoolingConfig]:
        return H.candidates(args)

    def validate_cfg(self, cfg: MeanPoolingConfig, args: MeanPoolingArgs, device: DeviceInfo) -> None:
        H.check(cfg)

    def resources(self, cfg: MeanPoolingConfig, args: MeanPoolingArgs, device: DeviceInfo) -> list[Need]:
        return H.needs(cfg)

    def run(self, args: MeanPoolingArgs, cfg: MeanPoolingConfig) -> jax.Array:
        from ._call import mean_pooling

        return mean_pooling(args, cfg)
