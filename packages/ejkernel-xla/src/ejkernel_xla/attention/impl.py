"""The XLA ``attention``: materialized logits, weights returned, gradients by autodiff."""

from __future__ import annotations

import jax

from ejkernel.ops import DeviceInfo
from ejkernel.ops.attention import AttentionConfig
from ejkernel.ops.attention.op import AttentionWeightsArgs
from ejkernel.ops.families.attention import AttentionImpl

from . import heuristics as H
from ._kernel import attention


class XlaAttention(AttentionImpl):
    """Plain attention in JAX that returns ``(output, weights)``: every feature, any device."""

    version = "1"

    def heuristic_cfg(self, args: AttentionWeightsArgs, device: DeviceInfo) -> AttentionConfig:
        return H.heuristic()

    def run(self, args: AttentionWeightsArgs, cfg: AttentionConfig) -> tuple[jax.Array, jax.Array]:
        return attention(args)
