"""Triton ``gla_attention``: the chunked kernels of ``ejkernel_triton._linear``."""

from .impl import TritonGLAttention

__all__ = ["TritonGLAttention"]
