"""The XLA ``kernel_delta_attention``."""

from .impl import XlaKernelDeltaAttention

__all__ = ["XlaKernelDeltaAttention"]
