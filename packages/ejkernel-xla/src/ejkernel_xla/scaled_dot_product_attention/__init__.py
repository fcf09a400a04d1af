from .impl import XlaScaledDotProductAttention

__all__ = ["XlaScaledDotProductAttention"]
