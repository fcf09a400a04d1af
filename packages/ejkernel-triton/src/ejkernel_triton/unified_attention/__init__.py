from .impl import TritonUnifiedAttention

__all__ = ["TritonUnifiedAttention"]
