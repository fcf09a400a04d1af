from .impl import XlaNativeSparseAttention

__all__ = ["XlaNativeSparseAttention"]
