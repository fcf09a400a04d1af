from .impl import CudnnScaledDotProductAttention

__all__ = ["CudnnScaledDotProductAttention"]
