from .impl import XlaUnifiedAttention

__all__ = ["XlaUnifiedAttention"]
