from .impl import XlaBlockSparseAttention

__all__ = ["XlaBlockSparseAttention"]
