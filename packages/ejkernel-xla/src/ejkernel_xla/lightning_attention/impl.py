"""The XLA ``lightning_attention`` implementation (the shared chunked scan of ``_linear.py``; chunk-size
heuristics there too)."""

from __future__ import annotations

from typing import ClassVar

from ejkernel.ops import KernelImpl, OpConfig
from ejkernel.ops.lightning_attention import LightningAttentionConfig

from .._linear import XlaLinearAttention


class XlaLightningAttention(XlaLinearAttention, KernelImpl):
    """``lightning_attention`` in plain JAX on any device: a scan over chunks (exact per-pair gating inside a
    chunk), rematerialized in the backward pass: memory linear in the length."""

    # 8-token chunks: several chunks, a partial last one, sequences starting mid-row.
    test_configs: ClassVar[dict[str, OpConfig]] = {"chunk8": LightningAttentionConfig(chunk_size=8)}
