from .impl import TritonFlashAttention

__all__ = ["TritonFlashAttention"]
