"""The benchmark of ``lightning_attention``: the linear-attention benchmark (see
:mod:`ejkernel.ops.gla_attention.bench`)."""

from ..gla_attention.bench import LinearAttentionBench

__all__ = ["BENCH"]

BENCH = LinearAttentionBench("lightning_attention")
