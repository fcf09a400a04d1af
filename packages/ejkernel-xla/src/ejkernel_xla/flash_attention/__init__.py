from .impl import XlaFlashAttention

__all__ = ["XlaFlashAttention"]
