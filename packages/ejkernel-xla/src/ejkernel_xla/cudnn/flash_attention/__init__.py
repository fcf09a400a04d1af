from .impl import CudnnFlashAttention

__all__ = ["CudnnFlashAttention"]
