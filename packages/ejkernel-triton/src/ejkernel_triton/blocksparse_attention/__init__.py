from .impl import TritonBlockSparseAttention

__all__ = ["TritonBlockSparseAttention"]
