"""The benchmark of ``state_space_v2``: the linear-attention benchmark (see
:mod:`ejkernel.ops.gla_attention.bench`)."""

from ..gla_attention.bench import LinearAttentionBench

__all__ = ["BENCH"]

BENCH = LinearAttentionBench("state_space_v2")
