"""Triton ``lightning_attention``: the chunked kernels of ``ejkernel_triton._linear``."""

from .impl import TritonLightningAttention

__all__ = ["TritonLightningAttention"]
