"""Triton ``recurrent_attention``: the chunked kernels of ``ejkernel_triton._linear``."""

from .impl import TritonRecurrentAttention

__all__ = ["TritonRecurrentAttention"]
