"""The Triton ``kernel_delta_attention``."""

from .impl import TritonKernelDeltaAttention

__all__ = ["TritonKernelDeltaAttention"]
