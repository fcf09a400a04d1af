"""The XLA ``mean_pooling`` implementation."""

from __future__ import annotations

import jax

from ejkernel.ops import DeviceInfo, KernelImpl
from ejkernel.ops.mean_pooling import MeanPoolingArgs, MeanPoolingConfig

from . import heuristics as H
from ._kernel import mean_pooling


class XlaMeanPooling(KernelImpl):
    """Mean pooling in plain JAX (reduction / segment sum in float32), any device."""

    def heuristic_cfg(self, args: MeanPoolingArgs, device: DeviceInfo) -> MeanPoolingConfig:
        return H.heuristic(args)

    def run(self, args: MeanPoolingArgs, cfg: MeanPoolingConfig) -> jax.Array:
        return mean_pooling(args)
