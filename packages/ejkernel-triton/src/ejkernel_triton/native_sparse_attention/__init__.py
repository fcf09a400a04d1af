from .impl import TritonNativeSparseAttention

__all__ = ["TritonNativeSparseAttention"]
