"""The XLA ``scaled_dot_product_attention``: materialized logits, gradients by autodiff."""

from __future__ import annotations

import jax

from ejkernel.ops import DeviceInfo
from ejkernel.ops.families.attention import AttentionArgs, AttentionImpl
from ejkernel.ops.scaled_dot_product_attention import ScaledDotProductAttentionConfig

from . import heuristics as H
from ._kernel import scaled_dot_product_attention


class XlaScaledDotProductAttention(AttentionImpl):
    """Plain attention in JAX (quadratic memory): the baseline, every feature, any device."""

    version = "1"

    def heuristic_cfg(self, args: AttentionArgs, device: DeviceInfo) -> ScaledDotProductAttentionConfig:
        return H.heuristic()

    def run(self, args: AttentionArgs, cfg: ScaledDotProductAttentionConfig) -> jax.Array:
        return scaled_dot_product_attention(args)
