"""The XLA ``scaled_dot_product_attention`` has nothing to tune: one config."""

from __future__ import annotations

from ejkernel.ops.scaled_dot_product_attention import ScaledDotProductAttentionConfig


def heuristic() -> ScaledDotProductAttentionConfig:
    return ScaledDotProductAttentionConfig()
